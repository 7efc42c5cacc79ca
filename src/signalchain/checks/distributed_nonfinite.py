"""A non-finite step across ranks: which rank's batch made it, said on rank 0.

Under data parallelism one rank's non-finite gradient reaches every rank through the gradient
all-reduce. Each rank's Monitor then fires at the same step, and each replays its own batch: the
rank whose batch made the value locates it (the op, the user's line, or `nonfinite.input`); the
others replay a finite forward and can only say that their gradient norm is not finite
(`replay_finite` in the evidence). Ranks > 0 share their located verdicts through the store; rank 0
copies them into its findings with their rank, and rewrites its own un-located finding of the same
step to name the rank the value came from. Pure: findings in, findings out.
"""

from __future__ import annotations

import dataclasses

from ..findings import Finding

__all__ = ["shared", "needs_origin", "from_rank", "attribute"]

CHECK = "checks.distributed_nonfinite"
_ORDER = ("nonfinite.input", "nonfinite.first", "nonfinite.state", "nonfinite.optimizer_state", "nonfinite.loss")


def shared(f: Finding) -> bool:
    """A finding a rank > 0 hands to rank 0: its verdicts on non-finite values."""
    return f.id.startswith("nonfinite.")


def needs_origin(f: Finding) -> bool:
    """A non-finite verdict whose replay was finite: the value came from elsewhere."""
    return f.id.startswith("nonfinite.") and bool(f.evidence.get("replay_finite"))


def from_rank(f: Finding) -> Finding:
    """Another rank's finding as rank 0 keeps it: its message opens with its rank."""
    rank = f.evidence.get("rank")
    if rank is None or f.message.startswith(f"rank {rank}:"):
        return f
    return dataclasses.replace(f, message=f"rank {rank}: {f.message}")


def _located(own: Finding, remote: list[Finding]) -> list[Finding]:
    step = own.evidence.get("step")
    found = [f for f in remote if f.id.startswith("nonfinite.") and not f.evidence.get("replay_finite")
             and f.evidence.get("step") == step and f.evidence.get("rank") is not None]
    return sorted(found, key=lambda f: (_ORDER.index(f.id) if f.id in _ORDER else len(_ORDER), f.evidence["rank"]))


def attribute(own: Finding, remote: list[Finding]) -> Finding:
    """`own` (this rank's un-located verdict) naming the rank whose batch made the value; `own`
    unchanged when no other rank located one at the same step."""
    if not needs_origin(own):
        return own
    located = _located(own, remote)
    if not located:
        return own
    ranks = sorted({int(f.evidence["rank"]) for f in located})
    first = located[0]
    who = f"rank {ranks[0]}'s batch" if len(ranks) == 1 else f"the batches of ranks {ranks}"
    head = own.message.split("; replaying this step")[0]
    origin = f"{first.id} @ {first.stage or '—'}: {first.message}"
    return dataclasses.replace(
        own, stage=first.stage or own.stage,
        message=f"{head}: it came from {who} through the gradient all-reduce (this rank's own batch replays "
                f"finite); rank {first.evidence['rank']} located it: {origin}",
        hint=f"fix what rank {first.evidence['rank']}'s finding names ({first.id}); its hint: {first.hint}",
        evidence={**own.evidence, "origin_ranks": ranks,
                  "origin": {"rank": first.evidence["rank"], "id": first.id, "stage": first.stage,
                             "message": first.message}})
