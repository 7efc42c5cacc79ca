"""Findings a rank > 0 hands to rank 0 outside the rank watch's own judgements (a located NaN).

Through the default store (set / check / get; JSON, nothing unpickled), never a collective: a rank
that found a non-finite value must not add a collective that the others do not make.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..findings import Finding

__all__ = ["publish", "read_shared"]

POLL_S = 0.02


def publish(store: Any, rank: int, findings: list[Finding]) -> None:
    """Rank `rank`'s shared findings, all of them (the key is rewritten whole)."""
    store.set(f"shared/{rank}", json.dumps([f.to_dict() for f in findings]))


def read_shared(store: Any, world: int, *, step: int | None = None, within: float = 0.0) -> list[Finding]:
    """Every other rank's shared findings (on rank 0). With `step`: wait up to `within` seconds until
    each rank has shared one of that step (they fire at the same step: the all-reduce gave every rank
    the same non-finite gradients), returning as soon as all have."""
    deadline = time.monotonic() + max(0.0, within)
    while True:
        out: list[Finding] = []
        ready = 0
        for r in range(1, world):
            key = f"shared/{r}"
            if not store.check([key]):
                continue
            found = [Finding.from_dict(d) for d in json.loads(store.get(key))]
            out += found
            ready += step is None or any(f.evidence.get("step") == step for f in found)
        if step is None or ready == world - 1 or time.monotonic() >= deadline:
            return out
        time.sleep(POLL_S)
