"""The zoo's registry: a member is a stable short name, the bed it is built on, what it claims
(its settings and tap conventions, as tags) and a factory. Its docstring says why it is clean."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Member", "MEMBERS", "member"]


@dataclass(frozen=True)
class Member:
    name: str
    bed: str  # "reference", "hf" or "symbolic"
    make: Callable[[], Any]
    why: str  # why this configuration is clean (the factory's docstring)
    tags: dict[str, Any] = field(default_factory=dict)
    pretrained: str | None = None  # the bed whose pretrained start the member fine-tunes

    @property
    def spec(self) -> str:
        """The pipeline spec a worker process loads (`signalchain.reference.zoo.build:NAME`)."""
        return f"signalchain.reference.zoo.build:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bed": self.bed, "spec": self.spec, "pretrained": self.pretrained,
                "tags": dict(self.tags), "why": self.why}


MEMBERS: dict[str, Member] = {}

def member(name: str, bed: str, pretrained: str | None = None,
           **tags: Any) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register the decorated zero-argument factory as zoo member `name`."""

    def deco(fn: Callable[[], Any]) -> Callable[[], Any]:
        if name in MEMBERS:
            raise ValueError(f"zoo member {name!r} registered twice")
        why = inspect.cleandoc(fn.__doc__ or "")
        if not why:
            raise ValueError(f"zoo member {name!r} must say in its docstring why it is clean")
        MEMBERS[name] = Member(name, bed, fn, why, dict(tags), pretrained)
        return fn

    return deco
