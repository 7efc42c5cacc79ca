"""The records `monitor/distributed.py` fills and `checks/distributed*.py` judge.

Two moments: an *exchange* (every N steps, on a side gloo group: each rank's section times, its
collective sequence number on the default group and one hash per parameter), and a *stall* (the
watchdog fired: each rank's published state, read through the store, since the collectives are
what is hung). Plain data: tests and reports build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SECTIONS", "SYNC_SECTIONS", "RankWindow", "DistExchange", "Collective", "RankStall",
           "StallView", "CollectiveCall", "SIZED"]

# The section names a rank's step is split into; anything else is counted as "other". The order is
# the layout of the exchanged tensors: names are only ever appended. "collective" is the time spent
# inside Python-level collectives on the watched group, taken out of the section they ran in
# (DDP's buffer broadcast at the start of every forward, SyncBatchNorm, a metric all-reduce).
SECTIONS: tuple[str, ...] = ("loader", "forward", "backward", "optimizer", "other", "collective")
# Sections that contain collectives by default: under DDP the gradient all-reduce runs inside
# backward (issued from C++), so the *fast* ranks wait there for the slow one and their backward
# inflates; "collective" is waiting by definition.
SYNC_SECTIONS: frozenset[str] = frozenset({"backward", "collective"})


@dataclass
class RankWindow:
    """One rank's step timings over the window since the previous exchange (seconds)."""

    rank: int
    steps: int  # steps measured in the window
    mean: dict[str, float]  # section -> mean seconds per step
    median: dict[str, float]  # section -> median seconds per step
    step_median: float  # median wall time of a whole step (all sections plus the rest)
    seq: int = -1  # default group's collective sequence number at the exchange (-1: unknown)


@dataclass
class DistExchange:
    """What every rank sent at one exchange, indexed by rank in the watched group."""

    step: int
    world: int
    windows: list[RankWindow]
    sync_sections: list[str] = field(default_factory=lambda: sorted(SYNC_SECTIONS))
    prev_seq: list[int] | None = None  # each rank's sequence number at the previous exchange
    param_names: list[str] = field(default_factory=list)  # named_parameters order
    param_counts: list[int] = field(default_factory=list)  # parameters each rank hashed
    hashes: list[list[int]] | None = None  # [rank][parameter]; None: not hashed this time
    # rank -> max |Δ| of the first differing parameter against rank 0's copy (when measured)
    max_abs_diff: dict[int, float] = field(default_factory=dict)


@dataclass
class Collective:
    """One collective as the flight recorder (or the sequence number) saw it on one rank."""

    seq: int  # collective sequence id on its group
    op: str  # "all_reduce", "barrier", "allgather"… ("" when only the sequence number is known)
    sizes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    pending: bool = False  # issued, not yet completed
    group: str = "0"  # the process group's name ("0": the default group)
    label: str = ""  # how to call the group in a message ("" for the default group)

    def describe(self) -> str:
        """`all_reduce [1] float`, the way torchfrtrace names a collective."""
        shape = " ".join(str(s) for s in self.sizes) if self.sizes else ""
        dtype = ",".join(d.lower() for d in self.dtypes) if self.dtypes else ""
        text = " ".join(p for p in (self.op or "collective", shape, dtype) if p)
        return f"{text} on {self.label or 'group ' + self.group}" if self.group != "0" else text

    def signature(self) -> tuple[str, int, str, str, str]:
        """What must agree between ranks for them to be in the same collective."""
        return (self.group, self.seq, self.op, repr(self.sizes), repr(self.dtypes))


@dataclass
class RankStall:
    """One rank's state when its watchdog fired, as it published it."""

    rank: int
    step: int | None = None  # the last step it completed
    phase: str = ""  # the watchdog's phase ("forward", "collective", "loader"…)
    since_s: float = 0.0  # seconds since its last step
    site: str = ""  # the user's file:line it is at
    where: str = ""  # one line: the innermost frame
    stack: str = ""  # the main thread's stack, trimmed
    seq: int = -1  # default group's sequence number (last collective issued)
    recent: list[Collective] = field(default_factory=list)  # last flight-recorder entries
    recorded: bool = False  # `recent` comes from the flight recorder (else: sequence number only)
    pid: int = 0

    def pending(self) -> Collective | None:
        """The collective this rank waits in (issued, not completed; the default group's first).

        Without the flight recorder only the watchdog's phase says so, and the collective is known
        by the default group's sequence number alone.
        """
        if not self.recorded:
            return Collective(self.seq, "", pending=True) if self.phase == "collective" else None
        waiting = [c for c in self.recent if c.pending]
        if not waiting:
            return None
        return min(waiting, key=lambda c: (c.group != "0", c.seq))


@dataclass
class StallView:
    """Every rank's state as one rank (the observer) read it within the grace period.

    `states[r]` is None when rank r published nothing fresh in time.
    """

    world: int
    observer: int
    states: dict[int, RankStall | None]
    grace_s: float = 0.0


# collectives whose tensors must have the same sizes on every rank
SIZED = frozenset({"broadcast", "all_reduce", "all_reduce_coalesced", "reduce", "all_gather", "all_gather_into_tensor",
                   "all_gather_single", "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor",
                   "broadcast_coalesced"})


@dataclass
class CollectiveCall:
    """One rank's collective, as it is about to issue it."""

    op: str  # "all_reduce", "broadcast_coalesced" (DDP's buffer broadcast), "barrier"…
    sizes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    site: str = ""  # the user's file:line ("" when the call came from library code only)

    def signature(self) -> tuple[object, ...]:
        if self.op in SIZED:
            return (self.op, tuple(tuple(s) for s in self.sizes), tuple(self.dtypes))
        return (self.op,)

    def describe(self) -> str:
        shape = " ".join(str(s) for s in self.sizes[:4]) + (" …" if len(self.sizes) > 4 else "")
        dtype = ",".join(sorted(set(self.dtypes)))
        text = " ".join(p for p in (self.op, shape, dtype) if p)
        return f"{text} at {self.site}" if self.site else f"{text} (from library code)"

    def to_dict(self) -> dict[str, object]:
        return {"op": self.op, "sizes": self.sizes, "dtypes": self.dtypes, "site": self.site}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> CollectiveCall:
        return cls(op=str(d.get("op", "")), sizes=[list(s) for s in d.get("sizes") or []],  # type: ignore[union-attr]
                   dtypes=[str(t) for t in d.get("dtypes") or []], site=str(d.get("site") or ""))  # type: ignore[union-attr]
