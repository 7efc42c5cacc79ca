"""Judge checkpoints: is one healthy, and where did the first unhealthy one change from the last healthy one.

**Health without borrowed constants.** No threshold here was measured on another pipeline: every
rule is a scale-free ratio against a baseline taken from this run itself.

- Anything non-finite is unhealthy: the loss, a gradient norm, an update ratio, a weight, a moment
  statistic or a learning rate; so is a step that raises.
- The claimed good end (the first checkpoint) is the baseline. It is judged only against the
  golden batch's own loss (captured from the fresh model): a loss more than `factor` times the
  golden's means the good end is not good, and the search is reported as flaky.
- Every other checkpoint is unhealthy when its golden-batch loss, its total or per-group gradient
  norm, its per-group update ratio |Δθ|/|θ| or one of its per-group Adam moment statistics is more
  than `factor` (default 10: an order of magnitude) above the good end's. Only growth is judged:
  a healthy run's loss and gradients fall and its schedule decays, so a fall proves nothing.
  Moments are bias-corrected (m/(1-β₁ᵗ), v/(1-β₂ᵗ), what Adam's step divides by); raw moments grow
  like 1-βᵗ over the first thousand steps and would make every later checkpoint look "10× off".
  A statistic whose baseline is zero or absent is not judged (there is no scale to compare with).
  A good end inside a warm-up makes later update ratios legitimately larger: choose a good end
  after warm-up, or raise `--factor`.

**Where the change is: places in causal order.** Checkpoint k is what the update between k-1 and k
made: that update used the learning rate and the optimizer moments it stored (Adam updates m and v
from the gradient first, then moves θ by lr·m̂/√v̂), so those come first; the weights θ_k are their
result; the golden run's forward stages (in tap order), its loss and its gradients are functions
of θ_k; the probe's own update is a function of all of them. The earliest place in
`PLACES` = lr → moments → weights → stages → loss → grad → update where the first unhealthy
checkpoint differs abnormally from the last healthy one (a ratio above `factor`, a value turned
non-finite, Adam's step going backwards, an exactly-compared stage such as the tokens changing, or
weights that moved more than `factor` × the steps between them × the update ratio measured at the
healthy one) is the finding; within a place the largest ratio wins, except stages, where the
earliest stage does. When nothing jumped by `factor` between the two, the run drifted: the finding
then names the first reason the unhealthy checkpoint fails against the good end.
"""

from __future__ import annotations

import math

from ..findings import Finding, Severity
from ..records.checkpoints import (
    MOMENT_STATS,
    PLACES,
    CheckpointBisect,
    CheckpointHealth,
    CheckpointPair,
    GroupStats,
    Reason,
)

__all__ = ["judge_health", "judge_change", "bisect_findings", "DEFAULT_FACTOR", "place_stage", "describe_reason"]

DEFAULT_FACTOR = 10.0
_JUDGED_MOMENTS = tuple(s for s in MOMENT_STATS if not s.endswith(".finite"))
_NOT_STAGES = ("loss", "grad.norm", "amp.scale")  # judged as places of their own
_CHECK = "checks.checkpoints"


def _finite(v: float | None) -> bool:
    return v is None or math.isfinite(v)


def _above(place: str, stat: str, value: float | None, base: float | None, factor: float, group: str | None = None,
           stage: str | None = None) -> Reason | None:
    """A reason when `value` is non-finite while `base` is not, or more than `factor` × a positive `base`."""
    if value is None:
        return None
    if not math.isfinite(value):
        return Reason(place, stat, value, base, group, stage, math.inf, "not finite") if _finite(base) else None
    if base is None or not math.isfinite(base) or base <= 0 or value <= factor * base:
        return None
    return Reason(place, stat, value, base, group, stage, value / base, f"more than {factor:g}× the baseline")


def _order(reasons: list[Reason]) -> list[Reason]:
    def key(r: Reason) -> tuple[int, float]:
        return PLACES.index(r.place), 0.0 if r.place == "stages" else -(r.ratio or 0.0)

    return sorted(reasons, key=key)  # stable: stages keep their tap order


def _group_reasons(g: GroupStats, base: GroupStats | None, factor: float) -> list[Reason]:
    out: list[Reason | None] = []
    b = base or GroupStats(g.name)
    out.append(_above("lr", "lr", g.lr, None, factor, g.name))  # only non-finite: the schedule is the user's
    if g.weight_finite is not None and g.weight_finite < 1.0:
        out.append(Reason("weights", "weight_finite", g.weight_finite, 1.0, g.name, ratio=math.inf,
                          why="weights not finite"))
    out.append(_above("weights", "weight_norm", g.weight_norm, None, factor, g.name))
    for stat in MOMENT_STATS:
        v = g.moments.get(stat)
        if stat.endswith(".finite"):
            if v is not None and v < 1.0:
                out.append(Reason("moments", stat, v, 1.0, g.name, ratio=math.inf, why="moments not finite"))
        else:
            out.append(_above("moments", stat, v, b.moments.get(stat), factor, g.name))
    out.append(_above("grad", "grad_norm", g.grad_norm, b.grad_norm, factor, g.name))
    out.append(_above("update", "update_ratio", g.update_ratio, b.update_ratio, factor, g.name))
    return [r for r in out if r is not None]


def judge_health(h: CheckpointHealth, baseline: CheckpointHealth | None, golden_loss: float | None,
                 factor: float = DEFAULT_FACTOR) -> list[Reason]:
    """Why `h` is unhealthy (empty: healthy). `baseline` None judges the good end itself (against
    the golden's loss and finiteness only)."""
    if not h.loaded:
        return []
    out: list[Reason | None] = []
    if h.error is not None:
        out.append(Reason("loss", "step", None, why=f"the probe failed: {h.error}"))
    out.append(_above("loss", "loss", h.loss, golden_loss if baseline is None else baseline.loss, factor))
    out.append(_above("grad", "grad_norm", h.grad_norm, baseline.grad_norm if baseline else None, factor))
    for g in h.groups:
        base = baseline.group(g.name) if baseline is not None else None
        out += _group_reasons(g, base, factor) if baseline is not None else [
            r for r in _group_reasons(g, None, factor) if r.ratio == math.inf or r.why.endswith("not finite")]
    return _order([r for r in out if r is not None])


def _change_reasons(pair: CheckpointPair, factor: float) -> list[Reason]:
    a, b = pair.a, pair.b
    out: list[Reason | None] = []
    for gb in b.groups:
        ga = a.group(gb.name) or GroupStats(gb.name)
        out.append(_above("lr", "lr", gb.lr, ga.lr, factor, gb.name))
        if ga.step is not None and gb.step is not None and gb.step < ga.step:
            out.append(Reason("moments", "step", gb.step, ga.step, gb.name, why="the optimizer's step went backwards"))
        for stat in MOMENT_STATS:
            va, vb = ga.moments.get(stat), gb.moments.get(stat)
            if stat.endswith(".finite"):
                if va is not None and vb is not None and vb < va:
                    out.append(Reason("moments", stat, vb, va, gb.name, ratio=math.inf,
                                      why="moments turned non-finite"))
            else:
                out.append(_above("moments", stat, vb, va, factor, gb.name))
        if ga.weight_finite is not None and gb.weight_finite is not None and gb.weight_finite < ga.weight_finite:
            out.append(Reason("weights", "weight_finite", gb.weight_finite, ga.weight_finite, gb.name,
                              ratio=math.inf, why="weights turned non-finite"))
        out.append(_above("weights", "weight_norm", gb.weight_norm, ga.weight_norm, factor, gb.name))
        drift = pair.drift.get(gb.name)
        if ga.update_ratio is not None:
            expected = pair.steps_between * ga.update_ratio
            r = _above("weights", "drift", drift, expected, factor, gb.name)
            if r is not None:
                r.why = f"moved more than {factor:g}× {pair.steps_between} step(s) × the update ratio at {a.name}"
            out.append(r)
    for s in pair.stages:
        if s.equal or s.stage in _NOT_STAGES:
            continue
        if s.exact:
            out.append(Reason("stages", "content", None, None, stage=s.stage, why="exactly compared values differ"))
            continue
        fa, fb = s.a.get("finite_fraction"), s.b.get("finite_fraction")
        if fa is not None and fb is not None and fb < fa:
            out.append(Reason("stages", "finite_fraction", fb, fa, stage=s.stage, ratio=math.inf,
                              why="values turned non-finite"))
        for stat in ("abs_max", "std"):
            out.append(_above("stages", stat, s.b.get(stat), s.a.get(stat), factor, stage=s.stage))
    if b.error is not None and a.error is None:
        out.append(Reason("loss", "step", None, why=f"the probe failed: {b.error}"))
    out.append(_above("loss", "loss", b.loss, a.loss, factor))
    for gb in b.groups:
        ga = a.group(gb.name) or GroupStats(gb.name)
        out.append(_above("grad", "grad_norm", gb.grad_norm, ga.grad_norm, factor, gb.name))
        out.append(_above("update", "update_ratio", gb.update_ratio, ga.update_ratio, factor, gb.name))
    return [r for r in out if r is not None]


def judge_change(pair: CheckpointPair, factor: float = DEFAULT_FACTOR) -> list[Reason]:
    """Every abnormal change from `pair.a` to `pair.b`, the first place first (see the module docstring)."""
    return _order(_change_reasons(pair, factor))


def place_stage(r: Reason) -> str:
    """The finding's stage for a reason: `optimizer` for the optimizer state, else `model`, `grad`, the stage."""
    return {"lr": "optimizer", "moments": "optimizer", "update": "optimizer", "weights": "model",
            "grad": "grad", "loss": "loss"}.get(r.place) or r.stage or "model"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def describe_reason(r: Reason, baseline_name: str = "the baseline") -> str:
    where = f"param group {r.group!r} " if r.group else (f"stage {r.stage!r} " if r.stage else "")
    if r.value is None and r.baseline is None:
        return f"{where}{r.statistic}: {r.why}"
    if r.ratio is not None and math.isfinite(r.ratio) and r.why.startswith("more than"):
        return f"{where}{r.statistic} {_num(r.value)} against {_num(r.baseline)} at {baseline_name} (×{r.ratio:.3g})"
    return f"{where}{r.statistic} {_num(r.value)} against {_num(r.baseline)} at {baseline_name} ({r.why})"


_HINTS = {
    "lr": "the learning rate stored for this group jumped: look at the schedule (or the code that sets "
          "group['lr']) at the steps between the two checkpoints",
    "moments": "Adam's moments of this group jumped while the step before was healthy: something scaled this "
               "group's gradients at the steps between the two checkpoints (a gradient multiplier standing in for a "
               "learning rate, a loss scale, an outlier batch); v stays inflated for ~1/(1-β₂) steps and freezes the "
               "group, so resume from the last healthy checkpoint with that fixed, or reset this group's state",
    "weights": "the update that produced this checkpoint moved the weights of this group abnormally: look at the "
               "learning rate and clipping of the steps between the two checkpoints",
    "stages": "the golden batch's forward parts at this stage first: inspect the module that produces it "
              "(`signalchain compare` on a golden captured from each checkpoint shows the values)",
    "loss": "the loss of the golden batch jumped with no earlier place changing abnormally: look at the loss code "
            "and at what the model outputs",
    "grad": "the gradients of this group jumped: look at the backward path (clipping, scaling) of the golden batch",
    "update": "one update from the stored state moves this group abnormally: look at the stored learning rate "
              "and moments together",
}


def _skipped(p: CheckpointHealth) -> Finding:
    return Finding("bisect.skipped", Severity.INFO, None, f"checkpoint {p.name} was skipped: {p.skip_reason}",
                   evidence={"checkpoint": p.name, "path": p.path, "reason": p.skip_reason},
                   hint="the search went on with its neighbours; re-save it with torch.save of tensors and plain "
                        "containers (or safetensors) to include it", check=_CHECK)


def _flaky(res: CheckpointBisect, end: CheckpointHealth, good: bool) -> Finding:
    if good:
        first = end.reasons[0] if end.reasons else None
        message = (f"the claimed good end {end.name} is itself unhealthy: "
                   f"{describe_reason(first, 'the golden batch') if first else 'unknown'}; nothing was bisected")
        hint = "start from an earlier checkpoint (give a glob that includes a healthy one)"
    else:
        message = (f"the claimed bad end {end.name} is healthy (within {res.factor:g}× the good end on every "
                   "statistic); nothing was bisected")
        hint = ("the failure does not show on the golden batch at these checkpoints: include later checkpoints, "
                "lower --factor, or check that the failure reproduces")
    return Finding("bisect.flaky", Severity.WARNING, None, message,
                   evidence={"end": end.to_dict(), "runs": res.runs, "factor": res.factor}, hint=hint, check=_CHECK)


def bisect_findings(res: CheckpointBisect, changes: list[Reason] | None = None) -> list[Finding]:
    """The findings of a checkpoint search; `changes` is `judge_change(res.pair)` when there is a pair."""
    out = [_skipped(p) for p in res.skipped]
    absent = [p.name for p in res.probes if p.loaded and not p.has_optimizer_state]
    if absent:
        out.append(Finding("bisect.optimizer_state_absent", Severity.INFO, "optimizer",
                           f"{len(absent)} checkpoint(s) hold no optimizer state ({', '.join(absent[:4])}): their "
                           "update ran from a fresh optimizer and no moments were compared",
                           evidence={"checkpoints": absent},
                           hint="save optimizer.state_dict() with the weights to bisect the optimizer too",
                           check=_CHECK))
    good, bad = res.probe_of(res.last_healthy), res.probe_of(res.first_unhealthy)
    if res.status in ("flaky_good", "flaky_bad"):
        loaded = [p for p in res.probes if p.loaded]
        end = loaded[0] if res.status == "flaky_good" else (loaded[1] if len(loaded) > 1 else None)
        if end is not None:
            out.append(_flaky(res, end, res.status == "flaky_good"))
        return out
    if res.status == "unrunnable_end" or good is None or bad is None or res.pair is None:
        out.append(Finding("bisect.unrunnable_end", Severity.WARNING, None,
                           f"fewer than two of the {len(res.checkpoints)} checkpoints load; nothing was bisected",
                           evidence={"checkpoints": res.checkpoints}, check=_CHECK))
        return out
    changes = judge_change(res.pair, res.factor) if changes is None else changes
    gradual = not changes
    first = changes[0] if changes else (bad.reasons[0] if bad.reasons else Reason("loss", "unknown", None))
    against = good.name if not gradual else next(p.name for p in res.probes if p.loaded)
    evidence = {"last_healthy": good.name, "first_unhealthy": bad.name, "place": first.place, "reason": first.to_dict(),
                "changes": [r.to_dict() for r in changes], "unhealthy_because": [r.to_dict() for r in bad.reasons],
                "groups": res.pair.group_table(), "steps_between": res.pair.steps_between, "factor": res.factor,
                "runs": res.runs, "probes": [p.to_dict() for p in res.probes]}
    if res.status == "ambiguous":
        names = res.checkpoints[res.last_healthy + 1: res.first_unhealthy + 1]
        out.append(Finding("bisect.ambiguous", Severity.WARNING, place_stage(first),
                           f"the first unhealthy checkpoint is one of {', '.join(names)} (those between could not be "
                           f"loaded); {bad.name} differs from {good.name} first at: {describe_reason(first, against)}",
                           evidence={**evidence, "candidates": names}, hint=_HINTS.get(first.place, ""), check=_CHECK))
        return out
    lead = f"checkpoint {bad.name}" + (f" (step {bad.step})" if bad.step is not None else "")
    how = ("drifted there: no place jumped more than "
           f"{res.factor:g}× since {good.name}; first against the good end: ") if gradual else "first changed at: "
    out.append(Finding("bisect.first_bad_checkpoint", Severity.ERROR, place_stage(first),
                       f"{lead} is the first unhealthy one after {good.name}; it "
                       f"{how}{describe_reason(first, against)}",
                       evidence=evidence, hint=_HINTS.get(first.place, ""), check=_CHECK))
    return out
