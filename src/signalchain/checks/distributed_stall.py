"""Judge a hang across ranks from the states each rank published when its watchdog fired.

Input: a `StallView` (one observer's reading of every rank's `RankStall`, or None for a rank that
published nothing fresh within the grace). Pure: no torch, no I/O. Every rank runs it on what it
read; the messages do not depend on the observer, so rank 0 deduplicates them by (id, message).

- `dist.desync` (error) @ runtime, evidence `kind="collective"`: the ranks that wait in a collective
  do not wait in the same one — different sequence ids, or the same id with a different operation,
  group, size or dtype (a barrier against an all-reduce). The collective named is the earliest
  one some rank waits in on the default group (torchfrtrace's "not all ranks joining collective
  5"); the missing ranks are the others, with each rank's collective, site and stack.
- `dist.desync` (error) @ runtime, evidence `kind="hung_rank"`: while some ranks wait in a
  collective, a rank is in none (it sleeps, loops or blocks in its own code), or published no state
  at all within the grace (its process is frozen, dead, or holds the interpreter). This is the
  issue's "hung rank named by the watchdog on every other rank"; it is a `dist.desync` (the rank
  fell out of the collective schedule) rather than `perf.stall`, which the watchdog already gives
  for its own rank. Only while some rank waits in a collective: when nobody does (a slow
  checkpoint save on one rank, its watchdog's timeout shorter than the save), the others have not
  stalled yet and their silence says nothing.
"""

from __future__ import annotations

from ..findings import Finding
from ..records.distributed import Collective, RankStall, StallView
from .base import make

__all__ = ["judge_stall"]

CHECK = "checks.distributed"
STACK_CHARS = 2000  # of each rank's stack kept in evidence


def _rank_line(s: RankStall | None) -> str:
    if s is None:
        return "no state"
    c = s.pending()
    at = f" at {s.site}" if s.site else (f" at {s.where}" if s.where else "")
    if c is not None:
        seq = f"collective {c.seq}" if c.seq >= 0 else "a collective"
        return f"in {seq} ({c.describe()}){at}"
    return f"in no collective (phase {s.phase or '?'}, last issued {s.seq}){at}"


def _ranks_evidence(view: StallView) -> dict[int, dict[str, object]]:
    out: dict[int, dict[str, object]] = {}
    for r in range(view.world):
        s = view.states.get(r)
        if s is None:
            out[r] = {"state": "none"}
            continue
        c = s.pending()
        out[r] = {"collective": c.describe() if c else None, "seq": c.seq if c else s.seq,
                  "group": c.group if c else None, "phase": s.phase, "step": s.step,
                  "since_s": round(s.since_s, 3), "site": s.site, "where": s.where,
                  "stack": s.stack[-STACK_CHARS:], "pid": s.pid}
    return out


def _target(waiting: dict[int, Collective]) -> Collective:
    """The collective to name: the earliest one on the default group, else the earliest anywhere;
    among equal ids, the one most ranks wait in."""
    def key(c: Collective) -> tuple[bool, int, int]:
        same = sum(1 for o in waiting.values() if o.signature() == c.signature())
        return (c.group != "0", c.seq, -same)
    return min(waiting.values(), key=key)


def judge_stall(view: StallView) -> list[Finding]:
    """`dist.desync` for a collective not all ranks joined, and for a hung rank."""
    states = {r: view.states.get(r) for r in range(view.world)}
    silent = sorted(r for r, s in states.items() if s is None)
    waiting = {r: c for r, s in states.items() if s is not None and (c := s.pending()) is not None}
    idle = sorted(r for r, s in states.items() if s is not None and r not in waiting)
    evidence = _ranks_evidence(view)
    lines = "; ".join(f"rank {r} {_rank_line(states[r])}" for r in range(view.world))
    out: list[Finding] = []
    if waiting:
        target = _target(waiting)
        joined = sorted(r for r, c in waiting.items() if c.signature() == target.signature())
        others = sorted(r for r in waiting if r not in joined)
        if others:
            seq = f"collective {target.seq}" if target.seq >= 0 else "the collective"
            out.append(make(
                "dist.desync", "error", "runtime",
                f"not all ranks joined {seq} ({target.describe()}): missing ranks {others}, which "
                f"wait in another collective ({lines})",
                CHECK,
                hint="every rank must issue the same collectives in the same order: look at the "
                     "missing ranks' sites for a collective only some ranks run (a metric "
                     "all-reduce, a barrier under `if rank == 0`, an uneven number of batches)",
                kind="collective", collective=target.describe(), seq=target.seq,
                group=target.group, joined=joined, missing_ranks=others, ranks=evidence))
    hung = sorted(set(idle) | set(silent)) if waiting else []
    if hung:
        told = {r: ("published no state" if r in silent else _rank_line(states[r])) for r in hung}
        where = "; ".join(f"rank {r} {t}" for r, t in told.items())
        wait = (f" while ranks {sorted(waiting)} wait in collectives" if waiting else "")
        out.append(make(
            "dist.desync", "error", "runtime",
            f"hung ranks {hung}{wait}: {where}",
            CHECK,
            hint="look at the hung ranks' stacks: a rank blocked in its own code (a lock, a sleep, "
                 "I/O, an input() call) or a dead process holds every other rank in its next "
                 "collective until the group timeout",
            kind="hung_rank", hung_ranks=hung, silent_ranks=silent, waiting_ranks=sorted(waiting),
            ranks=evidence))
    return out
