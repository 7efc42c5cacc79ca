"""Layer 1: the measurement plane. Typed records experiments fill and checks read, one file per
family; no torch in them, so judges, reports and tests build them by hand."""
