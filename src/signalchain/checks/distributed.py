"""Judge one exchange between ranks: desynced collectives, a straggling rank, diverged replicas.

Input: a `DistExchange` (every rank's window of section times, its collective sequence number on
the default group, one hash per parameter). Pure: no torch, no I/O.

- `dist.desync` (error) @ runtime: ranks issued different numbers of collectives on the default
  group by the time of the exchange (every rank calls it at the same step). Collectives pair up
  by order, so the rest of the run pairs the wrong ones: a hang, or a silent mix of tensors.
  The ranks that differ from the majority (ties: from rank 0) are named.
- `dist.straggler` (warning) @ runtime: a rank whose median time in a *non-synchronising* section
  (loader, forward, optimizer…) is ≥ `ratio` × the best rank's and exceeds it by ≥ 25 % of the
  median step: the others then wait a quarter of every step for it. (At 10 % a clean 2-rank
  Lightning run on 2 CPU cores showed one rank 1 ms slower between batches, window after window, on
  a 7 ms step: bookkeeping, not a straggler worth a warning.) RankWatch says it only at two
  exchanges in a row. Synchronising sections (backward under DDP, and any the caller marks) are left
  out: there the fast ranks wait for the slow one, so they look slow. "other" (the step's time
  outside every timed section) counts as synchronising when no synchronising section was timed at
  all, since the collectives then fall into it. Medians over the window make one hiccup harmless;
  both thresholds are relative to what this run measures. Evidence: rank → section → seconds, and
  the relative score (rank's median / best rank's median, 1 = the best) à la NVIDIA resiliency-ext.
- `dist.param_divergence` (error) @ model: replicas that DDP keeps bitwise equal hold different
  bytes. Stage "model" because what is seen to differ is the model's state (the weights); the cause
  is usually upstream of it, in an update that is not the same everywhere (a rank-local write, a
  non-deterministic optimizer, a skipped step on one rank), which the hint names. The first
  parameter (named_parameters order) that differs is named, with the ranks that differ from the
  majority (ties: from rank 0), how many parameters differ, and max |Δ| where measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import median

from ..findings import Finding
from ..records.distributed import SECTIONS, DistExchange
from .base import make

__all__ = ["judge_exchange", "judge_desync", "judge_straggler", "judge_param_divergence",
           "odd_ranks"]

CHECK = "checks.distributed"
STRAGGLER_RATIO = 1.5
STRAGGLER_STEP_SHARE = 0.25


def odd_ranks(values: Sequence[object]) -> list[int]:
    """Ranks whose value differs from the majority's; on a tie the reference is rank 0's."""
    counts = Counter(values)
    top = max(counts.values())
    leaders = {v for v, n in counts.items() if n == top}
    ref = values[0] if values[0] in leaders else next(v for v in values if v in leaders)
    return [r for r, v in enumerate(values) if v != ref]


def judge_desync(ex: DistExchange) -> list[Finding]:
    """`dist.desync`: ranks at different collective sequence numbers at the same step."""
    seqs = [w.seq for w in ex.windows]
    if len(seqs) < 2 or any(s < 0 for s in seqs) or len(set(seqs)) == 1:
        return []
    odd = odd_ranks(seqs)
    since = ([s - p for s, p in zip(seqs, ex.prev_seq)] if ex.prev_seq and len(ex.prev_seq) == len(seqs)
             else None)
    per_rank = ", ".join(f"rank {r}: {s}" for r, s in enumerate(seqs))
    extra = f" (since the previous exchange: {', '.join(f'+{d}' for d in since)})" if since else ""
    return [make(
        "dist.desync", "error", "runtime",
        f"at step {ex.step} ranks issued different numbers of collectives on the default group "
        f"({per_rank}){extra}: ranks {odd} are out of step with the others",
        CHECK,
        hint="collectives pair up by order: look for a collective that runs on some ranks only "
             "(a metric all-reduce under `if rank == 0`, an uneven last batch, an early break)",
        kind="sequence", step=ex.step, sequence_numbers=seqs, since_previous=since, ranks=odd)]


def _sync_sections(ex: DistExchange) -> set[str]:
    sync = set(ex.sync_sections)
    timed = any(w.median.get(s, 0.0) > 0 for w in ex.windows for s in sync if s != "other")
    if not timed:
        sync.add("other")  # the collectives fell into the untimed rest of the step
    return sync


def judge_straggler(ex: DistExchange, ratio: float = STRAGGLER_RATIO) -> list[Finding]:
    """`dist.straggler`: one rank slower than the best in a section without collectives."""
    wins = [w for w in ex.windows if w.steps > 0]
    if len(wins) < 2:
        return []
    step_ref = median(w.step_median for w in wins)
    if step_ref <= 0:
        return []
    sync = _sync_sections(ex)
    names = [s for s in SECTIONS if s not in sync] + sorted(
        {s for w in wins for s in w.median} - set(SECTIONS) - sync)
    table = {w.rank: {s: round(w.median.get(s, 0.0), 6) for s in SECTIONS} for w in wins}
    slow: dict[int, list[str]] = {}
    scores: dict[int, dict[str, float | None]] = {w.rank: {} for w in wins}
    for s in names:
        vals = {w.rank: w.median.get(s, 0.0) for w in wins}
        best = min(vals.values())
        for r, v in vals.items():
            scores[r][s] = round(v / best, 3) if best > 0 else (1.0 if v <= 0 else None)
            if v > best and v >= ratio * best and v - best >= STRAGGLER_STEP_SHARE * step_ref:
                slow.setdefault(r, []).append(s)
    out = []
    for r, secs in sorted(slow.items()):
        worst = max(secs, key=lambda s: table[r][s] - min(t[s] for t in table.values()))
        best = min(t[worst] for t in table.values())
        excess = table[r][worst] - best
        out.append(make(
            "dist.straggler", "warning", "runtime",
            f"rank {r} is a straggler: its median {worst} takes {table[r][worst]:.4g} s against "
            f"{best:.4g} s on the best rank ({excess / step_ref:.0%} of the {step_ref:.4g} s step), "
            f"over the {min(w.steps for w in wins)} steps before step {ex.step}",
            CHECK,
            hint=f"the other ranks wait for rank {r} in their collectives; look at what rank {r} "
                 f"does in {worst} (its data shard, its host, a rank-local log or check)",
            rank=r, sections=secs, section=worst, step=ex.step, step_median=step_ref,
            seconds=table, relative=scores, synchronising=sorted(sync)))
    return out


def judge_param_divergence(ex: DistExchange) -> list[Finding]:
    """`dist.param_divergence`: replicas whose parameters are no longer bitwise equal."""
    counts = ex.param_counts
    if counts and len(set(counts)) > 1:
        odd = odd_ranks(counts)
        return [make(
            "dist.param_divergence", "error", "model",
            f"at step {ex.step} ranks hold different numbers of parameters ({counts}): ranks {odd} "
            "do not run the same model", CHECK,
            hint="build the model the same way on every rank before wrapping it in DDP",
            step=ex.step, param_counts=counts, ranks=odd)]
    if not ex.hashes or len(ex.hashes) < 2:
        return []
    n = min(len(h) for h in ex.hashes)
    differing = [i for i in range(n) if len({h[i] for h in ex.hashes}) > 1]
    if not differing:
        return []
    first = differing[0]
    name = ex.param_names[first] if first < len(ex.param_names) else f"#{first}"
    odd = odd_ranks([h[first] for h in ex.hashes])
    ref = sorted(set(range(len(ex.hashes))) - set(odd))
    every_odd = sorted({r for i in differing for r in odd_ranks([h[i] for h in ex.hashes])})
    delta = {r: d for r, d in ex.max_abs_diff.items() if d is not None}
    worst = max(delta.values()) if delta else None
    dtext = f"; max |Δ| {worst:.3g} against rank 0" if worst is not None else ""
    return [make(
        "dist.param_divergence", "error", "model",
        f"replicas diverged by step {ex.step}: parameter {name!r} (the first of {len(differing)} of "
        f"{n} that differ) is not bitwise equal on ranks {odd} and ranks {ref}{dtext}",
        CHECK,
        hint="DDP keeps replicas equal only when every rank applies the same update: look for a "
             "rank-local write to the weights, a step skipped on one rank, or non-deterministic "
             "optimizer code; restore from a checkpoint taken before this step",
        step=ex.step, parameter=name, index=first, ranks=odd, reference_ranks=ref,
        differing=len(differing), total=n, differing_ranks=every_odd,
        differing_names=[ex.param_names[i] for i in differing[:8] if i < len(ex.param_names)],
        max_abs_diff=delta or None)]


def judge_exchange(ex: DistExchange, straggler_ratio: float = STRAGGLER_RATIO) -> list[Finding]:
    """All three judgements of one exchange, in DESIGN §4's order of the ids."""
    return judge_desync(ex) + judge_straggler(ex, straggler_ratio) + judge_param_divergence(ex)
