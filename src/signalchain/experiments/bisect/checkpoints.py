"""`bisect --checkpoints`: the first unhealthy checkpoint of a run, and where it changed (issue 14).

Each probe loads one checkpoint into the pipeline's own model and optimizer (`_probe.py`; a
pipeline's `load_checkpoint(path)` capability takes precedence, its contract is there), runs
the golden batch (the golden's seed) under a recording as one update from the stored optimizer
state (`update_step`: the pipeline's `train_step` when it has one), and measures the loss, each
param group's learning rate, weights, Adam moments, gradient norm at the optimizer step and update
ratio. `checks/checkpoints.judge_health` says healthy or not against the good end (the first
checkpoint that loads; the golden's loss judges that one), and `bisect_range` searches: both ends
first (an end that does not reproduce is flaky, nothing is bisected), a checkpoint that does not
load is skipped, at most ⌈log₂ N⌉ + 2 golden runs. An end that does not load is skipped too and
the next checkpoint inward takes its place.

The last healthy and first unhealthy checkpoints are then compared place by place: both are
loaded again (a load, not a golden run) for the weight drift per group, and their golden-run
traces stage by stage; `judge_change` names the first place that changed abnormally.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ...checks.checkpoints import DEFAULT_FACTOR, judge_health
from ...golden import Tolerance, compare_traces
from ...records.checkpoints import CheckpointBisect, CheckpointHealth, CheckpointPair, StageChange
from ...trace import StageRecord, Trace
from ..optimisation._train import norm_of
from ._checkpoint_files import CheckpointFile
from ._probe import group_params, load_into, probe_checkpoint
from .search import Verdict, bisect_range

__all__ = ["bisect_checkpoints"]

_EXACT_KINDS = ("text", "json")


def _magnitudes(rec: StageRecord | None) -> dict[str, float | None]:
    if rec is None:
        return {}
    s = rec.summary
    if rec.kind == "scalar":
        v = s.get("value")
        return {"abs_max": abs(v) if isinstance(v, (int, float)) else None,
                "finite_fraction": 1.0 if s.get("finite") else 0.0}
    return {k: s.get(k) for k in ("abs_max", "std", "finite_fraction")}


def _exact(rec: StageRecord) -> bool:
    return rec.kind in _EXACT_KINDS or rec.dtype.startswith(("int", "uint", "bool", "torch.int", "torch.bool"))


def _stage_changes(ta: Trace, tb: Trace, tolerance: Tolerance, per_stage: Mapping[str, Tolerance]) -> list[StageChange]:
    mine = {k: v for k, v in per_stage.items() if k in ta}
    out = []
    for d in compare_traces(ta, tb, tolerance, mine).stages:
        ra, rb = ta.get(d.stage), tb.get(d.stage)
        rec = ra or rb
        exact = rec is not None and _exact(rec)
        out.append(StageChange(d.stage, d.kind, d.equal, exact, _magnitudes(ra), _magnitudes(rb)))
    return out


def _drift(pipeline: Any, a: CheckpointFile, b: CheckpointFile, seed: int) -> dict[str, float | None]:
    """|θ_b - θ_a| / |θ_a| per param group (empty when either no longer loads)."""
    try:
        la, lb = load_into(pipeline, a, seed), load_into(pipeline, b, seed)
    except Exception:  # loaded once already; a second failure only costs the drift
        return {}
    out: dict[str, float | None] = {}
    for (name, pa), (_, pb) in zip(group_params(la.model, la.optimizer), group_params(lb.model, lb.optimizer)):
        base = norm_of(pa)
        out[name] = norm_of([q.detach().to(o.device) - o.detach() for q, o in zip(pb, pa)]) / base if base > 0 else None
    return out


def _steps_between(a: CheckpointHealth, b: CheckpointHealth) -> int:
    if a.step is not None and b.step is not None and b.step > a.step:
        return b.step - a.step
    return max(1, b.index - a.index)


def bisect_checkpoints(pipeline: Any, files: Sequence[CheckpointFile], *, seed: int, golden: Trace,
                       golden_loss: float | None, factor: float = DEFAULT_FACTOR, tolerance: Tolerance | None = None,
                       per_stage: Mapping[str, Tolerance] | None = None,
                       progress: Callable[[str], AbstractContextManager[Any]] | None = None) -> CheckpointBisect:
    """Search `files` (in step order) for the first unhealthy checkpoint; see the module docstring."""
    per_stage = dict(per_stage or {})
    tolerance = tolerance or Tolerance()
    res = CheckpointBisect("unrunnable_end", [f.name for f in files], factor=factor, golden_loss=golden_loss)
    cache: dict[int, tuple[CheckpointHealth, Trace | None]] = {}
    baseline: list[CheckpointHealth] = []

    def measure(i: int) -> CheckpointHealth:
        if i not in cache:
            with (progress or (lambda _: contextlib.nullcontext()))(
                    f"probing checkpoint {files[i].name} ({len(res.probes) + 1} of at most {len(files)})…"):
                health, trace = probe_checkpoint(pipeline, files[i], i, seed, golden, tolerance, per_stage)
            health.reasons = judge_health(health, baseline[0] if baseline else None, golden_loss, factor)
            cache[i] = health, trace
            res.probes.append(health)
        return cache[i][0]

    lo = next((i for i in range(len(files)) if measure(i).loaded), None)
    if lo is None:
        return res
    baseline.append(cache[lo][0])
    if not baseline[0].healthy:
        res.status = "flaky_good"
        return res
    hi = next((i for i in range(len(files) - 1, lo, -1) if measure(i).loaded), None)
    if hi is None:
        return res

    def verdict(i: int) -> Verdict:
        h = measure(i)
        return "skip" if not h.loaded else ("good" if h.healthy else "bad")

    indices = list(range(lo, hi + 1))
    found = bisect_range(indices, verdict)
    res.status = found.status
    if found.last_good is None or found.first_bad is None:
        return res
    res.last_healthy, res.first_unhealthy = indices[found.last_good], indices[found.first_bad]
    (a, ta), (b, tb) = cache[res.last_healthy], cache[res.first_unhealthy]
    stages = _stage_changes(ta, tb, tolerance, per_stage) if ta is not None and tb is not None else []
    res.pair = CheckpointPair(a, b, _steps_between(a, b), _drift(pipeline, files[res.last_healthy],
                                                                  files[res.first_unhealthy], seed), stages)
    return res
