"""Zoo members as pipeline specs: `signalchain.reference.zoo.build:NAME` is member NAME's factory,
so a worker process loads a member the way it loads any pipeline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._member import MEMBERS


def __getattr__(name: str) -> Callable[[], Any]:
    from . import hf, reference, symbolic  # noqa: F401  (importing registers the members)

    if name in MEMBERS:
        return MEMBERS[name].make
    raise AttributeError(name)
