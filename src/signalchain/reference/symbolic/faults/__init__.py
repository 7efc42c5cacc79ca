"""The symbolic bed's fault catalogue (filled by the modules of this package)."""

from ._registry import CATALOGUE, apply_faults, catalogue, get_fault

__all__ = ["CATALOGUE", "apply_faults", "catalogue", "get_fault"]
