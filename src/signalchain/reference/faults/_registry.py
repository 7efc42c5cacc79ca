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
    from ..model import MusicLM
    from ..pipeline import ReferencePipeline

__all__ = ["Fault", "CATALOGUE", "FAMILIES", "fault", "apply_faults", "get_fault", "catalogue", "patch_model"]

FAMILIES = ("flat_loss", "learning_rate", "nonfinite", "precision", "repetition_training",
            "repetition_generation", "conditioning", "silence", "splits", "performance", "step_boundaries")


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


def fault(name: str, family: str, cause: str, section: str, ids: Sequence[str], stage: str,
          symptom: str | None = None) -> Callable[[Callable[[ReferencePipeline], None]], Callable[[ReferencePipeline], None]]:
    """Register the decorated function as the injector of fault `name`."""
    if family not in FAMILIES:
        raise ValueError(f"fault {name!r}: unknown family {family!r}; allowed: {', '.join(FAMILIES)}")

    def deco(fn: Callable[[ReferencePipeline], None]) -> Callable[[ReferencePipeline], None]:
        if name in CATALOGUE:
            raise ValueError(f"fault {name!r} is registered twice")
        CATALOGUE[name] = Fault(name, family, cause, section, tuple(ids), stage, fn, symptom)
        return fn

    return deco


def get_fault(name: str) -> Fault:
    if name not in CATALOGUE:
        close = difflib.get_close_matches(name, CATALOGUE, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `signalchain faults --list` lists them"
        raise ValueError(f"unknown fault {name!r}{hint}")
    return CATALOGUE[name]


def apply_faults(pipeline: ReferencePipeline, names: Sequence[str]) -> None:
    for name in names:
        get_fault(name).apply(pipeline)




def catalogue(family: str | None = None) -> list[Fault]:
    """Every registered fault (of one family), in registration order."""
    return [f for f in CATALOGUE.values() if family is None or f.family == family]


def patch_model(p: ReferencePipeline, edit: Callable[[MusicLM], None]) -> None:
    """Make every model `p` builds go through `edit(model)` first: most model bugs live in the code
    that builds or wraps the model (a detach, a frozen module, an eps of 0), not in the class."""
    build = p.build_model

    def build_model(seed: int) -> MusicLM:
        model = build(seed)
        edit(model)
        return model

    p.build_model = build_model  # type: ignore[method-assign]
