"""The fault catalogue's registry: every failure cause the method lists, injected the way the real bug arises.

A fault is a function that changes a `ReferencePipeline` instance: it swaps one of the pipeline's
stage methods for a buggy version (a wrong slice, a `.detach()`, an inverted comparison…) or
changes a setting the way a bad config would. Each declares the finding id(s) that must fire and
the stage that must be blamed. Detectors never see any of this (DESIGN §6): they see only what the
pipeline's taps, outputs and gradients show.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..pipeline import ReferencePipeline

__all__ = ["Fault", "CATALOGUE", "FAMILIES", "fault", "fault_decorator", "lookup", "apply_faults", "get_fault",
           "catalogue", "patch_model"]

FAMILIES = ("flat_loss", "learning_rate", "nonfinite", "precision", "repetition_training",
            "repetition_generation", "conditioning", "silence", "splits", "performance", "step_boundaries",
            "profile")


@dataclass(frozen=True)
class Fault:
    name: str
    family: str
    cause: str  # in the method's words: which numbered cause this is
    section: str  # the seed section it comes from
    expected_ids: tuple[str, ...]
    expected_stage: str
    apply: Callable[[ReferencePipeline], None]
    symptom: str | None = None  # the `doctor --symptom` a user would report

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "cause": self.cause, "section": self.section,
                "expected_ids": list(self.expected_ids), "expected_stage": self.expected_stage,
                "symptom": self.symptom}


CATALOGUE: dict[str, Fault] = {}


def fault_decorator(table: dict[str, Fault], families: Sequence[str] = FAMILIES
                    ) -> Callable[..., Callable[[Callable[[Any], None]], Callable[[Any], None]]]:
    """A `@fault(...)` decorator that registers into `table` (each bed keeps its own catalogue), for
    faults of `families` (the method's; a bed may add its own, as the symbolic bed adds `symbolic`)."""

    def fault(name: str, family: str, cause: str, section: str, ids: Sequence[str], stage: str,
              symptom: str | None = None) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
        """Register the decorated function as the injector of fault `name`."""
        if family not in families:
            raise ValueError(f"fault {name!r}: unknown family {family!r}; allowed: {', '.join(families)}")

        def deco(fn: Callable[[Any], None]) -> Callable[[Any], None]:
            if name in table:
                raise ValueError(f"fault {name!r} is registered twice")
            table[name] = Fault(name, family, cause, section, tuple(ids), stage, fn, symptom)
            return fn

        return deco

    return fault


def lookup(table: dict[str, Fault], name: str) -> Fault:
    """The fault `name` of `table`, or a ValueError naming the closest ones."""
    if name not in table:
        close = difflib.get_close_matches(name, table, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `signalchain faults --list` lists them"
        raise ValueError(f"unknown fault {name!r}{hint}")
    return table[name]


fault = fault_decorator(CATALOGUE)


def get_fault(name: str) -> Fault:
    return lookup(CATALOGUE, name)


def apply_faults(pipeline: ReferencePipeline, names: Sequence[str]) -> None:
    for name in names:
        get_fault(name).apply(pipeline)


def catalogue(family: str | None = None) -> list[Fault]:
    """Every registered fault (of one family), in registration order."""
    return [f for f in CATALOGUE.values() if family is None or f.family == family]


class BedCatalogue:
    """A bed's own catalogue (HF, symbolic): its table, filled by importing every public module of
    `package` on first use, with the reference's lookup and apply."""

    def __init__(self, package: str, families: Sequence[str] = FAMILIES):
        self.package = package
        self.table: dict[str, Fault] = {}
        self.fault = fault_decorator(self.table, families)

    def _load(self) -> None:
        import importlib
        import pkgutil

        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")

    def get_fault(self, name: str) -> Fault:
        self._load()
        return lookup(self.table, name)

    def apply_faults(self, pipeline: Any, names: Sequence[str]) -> None:
        for name in names:
            self.get_fault(name).apply(pipeline)

    def catalogue(self, family: str | None = None) -> list[Fault]:
        self._load()
        return [f for f in self.table.values() if family is None or f.family == family]


def patch_model(p: Any, edit: Callable[[Any], None]) -> None:
    """Make every model `p` builds go through `edit(model)` first: most model bugs live in the code
    that builds or wraps the model (a detach, a frozen module, an eps of 0), not in the class."""
    build = p.build_model

    def build_model(seed: int) -> Any:
        model = build(seed)
        edit(model)
        return model

    p.build_model = build_model  # type: ignore[method-assign]
