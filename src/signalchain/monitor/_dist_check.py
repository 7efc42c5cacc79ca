"""Check a collective across ranks before it runs (`RankWatch(check_collectives=True)`).

What torch's `TORCH_DISTRIBUTED_DEBUG=DETAIL` does in C++ (its ProcessGroupWrapper all-gathers a
fingerprint of every collective on a helper gloo group and compares them before running it), done
for the Python-level collectives the wrapper of `_dist_collectives` sees, through the store: each
rank publishes its call (the collective, its tensors' sizes and dtypes, the user's file:line) under
the position the call takes in the watched group's sequence, reads every other rank's at the same
position, and `checks.distributed_collective` judges. A mismatch is reported (`dist.desync`, kind
`mismatch`, both calls and lines) and raised as `CollectiveMismatch` instead of being run: run, it
aborts the process inside gloo, or hangs NCCL, with nothing said.

A rank whose collective at that position is issued from C++ (DDP's gradient all-reduce inside
backward) publishes nothing there; it hangs in that collective, its stall watchdog publishes its
state (the flight recorder's pending collective), and the check reads that instead. A peer that says
nothing within `wait_s` is given up on: the collective runs as it would have without signalchain.
Keys are deleted `KEEP` positions later (an asynchronous collective may leave a peer that far
behind), so the store stays small.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from ..checks.distributed_collective import judge_collective
from ..findings import Finding
from ..records.distributed import SIZED, Collective, CollectiveCall
from ._dist_exchange import sequence_number
from ._dist_stall import stall_from_json
from ._stacks import is_library, is_ours

__all__ = ["CollectiveCheck", "CollectiveMismatch", "call_of", "checking", "DEFAULT", "as_pending"]

DEFAULT = False  # on when neither the caller nor SIGNALCHAIN_CHECK_COLLECTIVES says (see docs/families.md)

KEEP = 16
SLICE_S = 0.2
_FR_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
              "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}
_user: dict[str, bool] = {}  # filename -> the user's own code (cached: a collective may run every step)


def checking(asked: bool | None) -> bool:
    """Whether to check collectives: the caller's word, else SIGNALCHAIN_CHECK_COLLECTIVES, else DEFAULT."""
    if asked is not None:
        return bool(asked)
    env = os.environ.get("SIGNALCHAIN_CHECK_COLLECTIVES", "").strip().lower()
    return env in ("1", "true", "yes", "on") if env else DEFAULT


class CollectiveMismatch(RuntimeError):
    """Ranks were about to pair different collectives (the `dist.desync` finding says which)."""

    signalchain_verdict = True  # the collectives' wrapper lets this one through to the run


def _site() -> str:
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        mine = _user.get(name)
        if mine is None:
            mine = _user[name] = not is_library(name) and not is_ours(name)
        if mine:
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return ""


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(t for t in a if isinstance(t, torch.Tensor))
    return out


def call_of(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CollectiveCall:
    """The call as the other ranks will compare it."""
    op = name.lstrip("_")
    tensors = _tensors(args, kwargs) if op in SIZED or not op.endswith("object") else []
    return CollectiveCall(op=op, sizes=[list(t.shape) for t in tensors],
                          dtypes=[str(t.dtype).replace("torch.", "") for t in tensors], site=_site())


def _from_stall(text: bytes, since: float) -> CollectiveCall | None:
    """A peer's pending collective, from the state its stall watchdog published (fresh ones only)."""
    at, state = stall_from_json(text)
    pending = state.pending() if at >= since else None
    if pending is None or pending.group != "0" or not pending.op:
        return None
    return CollectiveCall(op=pending.op, sizes=pending.sizes,
                          dtypes=[_FR_DTYPES.get(d, d.lower()) for d in pending.dtypes],
                          site=state.site or state.where)


def as_pending(check: CollectiveCheck | None, refused: bool = True) -> Collective | None:
    """The collective a rank waits to issue while its check waits for the others, or the one its
    check refused (raised instead of issuing), as the flight recorder would list it: a stall then
    names it, not "in no collective", so a rank that left the schedule because the check stopped a
    mismatched collective is never called hung in its own code."""
    waiting = (check.pending or (check.refused if refused else None)) if check is not None else None
    if waiting is None:
        return None
    seq, call = waiting
    return Collective(seq=seq + 1, op=call.op, sizes=call.sizes, dtypes=call.dtypes, pending=True)


class CollectiveCheck:
    """Called by the collectives' wrapper before each one on the watched group (one thread)."""

    def __init__(self, store: Any, rank: int, world: int, group: Any, *, wait_s: float,
                 on_finding: Callable[[Finding], None]) -> None:
        self.store, self.rank, self.world, self.group = store, rank, world, group
        self.wait_s = float(wait_s)
        self.on_finding = on_finding
        self.checked = 0  # collectives checked
        self.unanswered = 0  # peers given up on
        self.pending: tuple[int, CollectiveCall] | None = None  # (sequence number, call) while waiting
        self.refused: tuple[int, CollectiveCall] | None = None  # the call the last check raised on

    def __call__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seq = sequence_number(self.group)
        self.refused = None
        if seq < 0:
            return
        mine = call_of(name, args, kwargs)
        self.store.set(f"call/{seq}/{self.rank}", json.dumps(mine.to_dict()))
        if seq >= KEEP:
            try:
                self.store.delete_key(f"call/{seq - KEEP}/{self.rank}")
            except Exception:
                pass
        calls = {self.rank: mine}
        start, wall = time.monotonic(), time.time()
        self.pending = (seq, mine)  # a stall while waiting here is a stall in this collective
        try:
            for r in range(self.world):
                if r != self.rank:
                    got = self._read(seq, r, start, wall)
                    if got is not None:
                        calls[r] = got
                    else:
                        self.unanswered += 1
        finally:
            self.pending = None
        self.checked += 1
        found = judge_collective(seq, calls, observer=self.rank)
        if found:
            self.refused = (seq, mine)
            self.on_finding(found[0])
            raise CollectiveMismatch(f"{found[0].id}: {found[0].message}")

    def _read(self, seq: int, r: int, start: float, wall: float) -> CollectiveCall | None:
        """Poll (a store's timed `wait` logs a warning at every timeout): at once, then backing off to
        `SLICE_S`; the peer's stall state is looked at every `SLICE_S`."""
        key, stall = f"call/{seq}/{r}", f"stall/{r}"
        pause, looked = 1e-4, time.monotonic()
        while True:
            if self.store.check([key]):
                return CollectiveCall.from_dict(json.loads(self.store.get(key)))
            now = time.monotonic()
            if now - looked >= SLICE_S:
                looked = now
                if self.store.check([stall]):  # the peer is stuck in a collective of its own
                    pending = _from_stall(self.store.get(stall), wall)
                    if pending is not None:
                        return pending
            if now - start >= self.wait_s:
                return None
            time.sleep(pause)
            pause = min(SLICE_S / 10, pause * 2)
