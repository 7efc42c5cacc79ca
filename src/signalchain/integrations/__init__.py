"""Layer 4: adapters that make real codebases a `Pipeline`."""
