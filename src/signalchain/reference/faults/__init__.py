"""The fault catalogue: every failure cause the method lists, injected the way the real bug arises.

One module per family registers its faults with `@fault(...)`. Importing this package imports them
all. Detectors never see any of this (DESIGN §6): they see only what the pipeline shows.
"""

from . import (  # noqa: F401  (registration)
    compile,
    conditioning,
    flat_loss,
    flat_loss_data,
    learning_rate,
    nonfinite,
    performance,
    precision,
    profile,
    repetition,
    silence,
    splits,
    step_boundaries,
)
from ._registry import CATALOGUE, FAMILIES, Fault, apply_faults, catalogue, fault, get_fault

__all__ = ["CATALOGUE", "FAMILIES", "Fault", "apply_faults", "catalogue", "fault", "get_fault"]
