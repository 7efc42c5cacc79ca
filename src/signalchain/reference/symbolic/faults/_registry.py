"""The symbolic bed's fault registry: the reference catalogue's `Fault` record and helpers, its own table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...faults._registry import FAMILIES as METHOD_FAMILIES
from ...faults._registry import Fault, fault_decorator, lookup, patch_model

__all__ = ["CATALOGUE", "FAMILIES", "fault", "apply_faults", "get_fault", "catalogue", "patch_model"]

#: The method's families, and the bed's own: what a tokenizer, a crop or an augmentation does to the notes.
FAMILIES = (*METHOD_FAMILIES, "symbolic")
CATALOGUE: dict[str, Fault] = {}
fault = fault_decorator(CATALOGUE, FAMILIES)


def get_fault(name: str) -> Fault:
    _load()
    return lookup(CATALOGUE, name)


def apply_faults(pipeline: Any, names: Sequence[str]) -> None:
    _load()
    for name in names:
        get_fault(name).apply(pipeline)


def catalogue(family: str | None = None) -> list[Fault]:
    _load()
    return [f for f in CATALOGUE.values() if family is None or f.family == family]


def _load() -> None:
    """Import every fault module of the package (registration happens on import)."""
    import importlib
    import pkgutil

    from .. import faults as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
