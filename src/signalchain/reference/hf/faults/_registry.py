"""The HF bed's fault registry: the same `Fault` record as the reference catalogue, its own table."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

from ...faults._registry import FAMILIES, Fault

__all__ = ["CATALOGUE", "fault", "apply_faults", "get_fault", "catalogue", "patch_model"]

CATALOGUE: dict[str, Fault] = {}


def fault(name: str, family: str, cause: str, section: str, ids: Sequence[str], stage: str,
          symptom: str | None = None) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    if family not in FAMILIES:
        raise ValueError(f"fault {name!r}: unknown family {family!r}; allowed: {', '.join(FAMILIES)}")

    def deco(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        if name in CATALOGUE:
            raise ValueError(f"fault {name!r} is registered twice")
        CATALOGUE[name] = Fault(name, family, cause, section, tuple(ids), stage, fn, symptom)
        return fn

    return deco


def get_fault(name: str) -> Fault:
    _load()
    if name not in CATALOGUE:
        close = difflib.get_close_matches(name, CATALOGUE, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `signalchain faults --list` lists them"
        raise ValueError(f"unknown HF bed fault {name!r}{hint}")
    return CATALOGUE[name]


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


def patch_model(p: Any, edit: Callable[[Any], None]) -> None:
    """Make every model `p` builds go through `edit(model)` first."""
    build = p.build_model

    def build_model(seed: int) -> Any:
        model = build(seed)
        edit(model)
        return model

    p.build_model = build_model
