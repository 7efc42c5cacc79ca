"""Judge the configured learning rate on what it does at the user's horizon.

A short run on one batch favours larger rates (short-horizon bias): a 4-step sweep can show that a
rate diverges, never that it is too small for a real run. So `optim.lr_too_small` is an error only
where no learning can happen, from what the configured settings (the pipeline's own optimizer and
schedule) did to each parameter group in real updates:

- the rate is 0 (or so small that rounding drops ≥ 99% of the update) at every optimizer step
  measured, in the groups that hold most of the trained values;
- at the largest rate the run uses (the configured one, or a schedule's peak among the measured
  steps) rounding to the weights' dtype loses at least half of the intended update: the weights
  move by rounding, not by the gradient.

Anything else that suggests a small rate (rounding losing a visible share, Adam's eps above the
gradient scale, a loss that barely moves over the overfit run, a sweep that prefers larger rates)
is `info`, with its numbers and the short-horizon caveat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from ...findings import Finding
from ...records.optimisation import CurveMeasurement, GroupRate, SweepMeasurement, UpdateMeasurement
from ..base import make
from .curves import CAVEAT, sweep_summary

__all__ = ["judge_rates", "lost_at", "CAVEAT", "LOST_ERROR"]

CHECK = "checks.rates"
#: Rounding that loses at least this share (by norm) of the intended update: the weights move by
#: rounding, not by the gradient.
LOST_ERROR = 0.5
#: A visible share lost to rounding (info).
LOST_INFO = 0.05
#: A rate at which rounding drops this much of the update is ~0.
ZERO_LOST = 0.99
#: Groups holding more than this share of the trained values decide "the model cannot learn".
MAJORITY = 0.5
#: Groups holding less than this share of the values are too small to mention for an info.
MENTION = 0.1
#: Adam's eps above √v̂ for this share of a group's values (info).
EPS_SHARE = 0.5
#: The overfit run's fitted loss drop below this share of its start (info).
FLAT_DROP = 0.01


def lost_at(g: GroupRate, rate: float | None) -> float | None:
    """The share of the intended update rounding loses at `rate`, read at the nearest grid rate at or
    above it (never more than what `rate` itself loses); 1 at a zero rate; None when not measured."""
    if rate is None:
        return None
    if rate <= 0:
        return 1.0
    if not g.lost_at:
        return None
    return next((share for r, share in g.lost_at if r >= rate * (1 - 1e-9)), g.lost_at[-1][1])


def _used(g: GroupRate, curve: CurveMeasurement | None) -> tuple[float | None, int]:
    """The largest rate the group used at any measured step (update run and overfit run), and how
    many steps were measured; None when the optimizer sets its own rate."""
    rates = list(g.step_lrs) + ([s[g.group] for s in curve.step_lrs if len(s) > g.group] if curve else [])
    if not rates or any(r is None for r in rates):
        return None, len(rates)
    return max(r for r in rates if r is not None), len(rates)


def _name(g: GroupRate, single: bool) -> str:
    return "" if single else f"group {g.group} ({g.values:,} values)"


def _groups(gs: list[GroupRate], single: bool) -> str:
    return "" if single else " in " + ", ".join(_name(g, single) for g in gs)


def _zero_rate(active: list[GroupRate], curve: CurveMeasurement | None, total: int) -> list[Finding]:
    single = len(active) == 1
    zero = []
    for g in active:
        used, n = _used(g, curve)
        if used is not None and n and (used == 0 or (lost_at(g, used) or 0) >= ZERO_LOST):
            zero.append((g, used, n))
    if sum(g.values for g, _, _ in zero) <= MAJORITY * total:
        return []
    g, used, n = max(zero, key=lambda z: z[0].values)
    n_upd, n_fit = len(g.step_lrs), n - len(g.step_lrs)
    steps = f"{n} optimizer steps measured ({n_upd} of the update run, {n_fit} of the overfit run)" if n_fit \
        else f"{n} optimizer steps measured"
    conf = g.configured_lr or 0.0
    where = _groups([z[0] for z in zero], single)
    tiny = "" if used == 0 else (f"; the largest rate used, {used:.3g}, loses {lost_at(g, used):.0%} of its update "
                                 f"to {g.dtype} rounding")
    if conf == 0:
        msg = (f"the configured learning rate is 0{where}: at every one of the {steps} no parameter can move, "
               "so nothing can learn")
        hint = ("the rate is 0 before any schedule: print the value handed to the optimizer and follow how it is "
                "computed (an integer division such as lr * (batch // 256), a unit conversion, a config key read as 0)")
    else:
        msg = (f"the learning rate is {'0' if used == 0 else '~0'} at every one of the {steps}{where}, although "
               f"the configured rate is {conf:.3g}{tiny}: the schedule lets no parameter learn")
        hint = (f"the schedule's factor is {'0' if used == 0 else '~0'} from step 0 to step {n - 1}: print "
                "scheduler.get_last_lr() for the first steps (an integer division in a warm-up, such as step // "
                "warmup, or a schedule built for 0 total steps gives this)")
    return [make("optim.lr_too_small", "error", "optimizer", msg, CHECK, hint=hint, configured_lr=conf,
                 largest_rate_used=used, steps=n, update_steps=n_upd, overfit_steps=n_fit,
                 groups=[_evidence(z[0], z[1]) for z in zero])]


def _peak(g: GroupRate, curve: CurveMeasurement | None) -> float:
    used, _ = _used(g, curve)
    return max(g.configured_lr or 0.0, used or 0.0)


def _own_rate(g: GroupRate) -> bool:
    """The optimizer computes this group's rate itself (a relative step: lr None)."""
    return g.configured_lr is None and (not g.step_lrs or any(r is None for r in g.step_lrs))


def _rate(g: GroupRate, curve: CurveMeasurement | None) -> float | None:
    """The rate to judge the group at: its peak, or None when the optimizer sets it (then the share
    lost is the one measured at the steps' own rates)."""
    return None if _own_rate(g) else _peak(g, curve)


def _lost(g: GroupRate, curve: CurveMeasurement | None) -> tuple[float | None, float | None]:
    r = _rate(g, curve)
    return (None, g.lost_step) if r is None else (r, lost_at(g, r))


def _r99(g: GroupRate) -> float | None:
    return next((r for r, share in g.lost_at if share <= 0.01), None)


def _below_resolution(active: list[GroupRate], curve: CurveMeasurement | None, total: int) -> list[Finding]:
    single = len(active) == 1
    hit = [(g, _peak(g, curve)) for g in active if not _own_rate(g)]  # a relative step is never ~0
    hit = [(g, r, lost_at(g, r)) for g, r in hit if r > 0]
    hit = [(g, r, s) for g, r, s in hit if s is not None and s >= LOST_ERROR]
    if sum(g.values for g, _, _ in hit) <= MAJORITY * total:
        return []
    g, r, s = max(hit, key=lambda h: h[0].values)
    stuck = g.stuck / g.with_grad if g.with_grad else 0.0
    ratio = f"; each update would move the weights by {r * g.unit_ratio:.2g} of their norm" if g.unit_ratio else ""
    others = [h for h in hit if h[0] is not g]
    more = "; " + ", ".join(f"{_name(h[0], False)}: {h[2]:.0%}" for h in others) if others else ""
    r99 = _r99(g)
    return [make("optim.lr_too_small", "error", "optimizer",
                 f"at the learning rate {r:.3g}{'' if single else ' of ' + _name(g, False)} {g.dtype} rounding loses "
                 f"{s:.0%} of the intended update{more}: {stuck:.0%} of the values with a non-zero gradient were "
                 f"left bit-identical by {len(g.step_lrs)} updates{ratio}. The updates are below what {g.dtype} "
                 "resolves at these weights: they move by rounding, not by the gradient, so nothing can learn",
                 CHECK,
                 hint=(f"{g.dtype} keeps 99% of these updates only from a rate of about {r99:.2g}; " if r99 else "")
                 + "follow how the rate is computed (a rule dividing it by a token or sample count, a unit mix-up)",
                 configured_lr=g.configured_lr, rate=r, lost=s, stuck_share=stuck, rate_for_99_percent=r99,
                 groups=[_evidence(h[0], h[1]) for h in hit])]


def _evidence(g: GroupRate, rate: float | None) -> dict:
    return {"group": g.group, "values": g.values, "dtype": g.dtype, "configured_lr": g.configured_lr,
            "step_lrs": g.step_lrs, "rate": rate, "lost": lost_at(g, rate), "lost_at_steps": g.lost_step,
            "stuck_share": g.stuck / g.with_grad if g.with_grad else None, "update_to_weight": g.ratio,
            "update_to_weight_per_unit_rate": g.unit_ratio, "eps": g.eps, "eps_share": g.eps_share,
            "shadow_error": g.shadow_error}


def _slope(curve: CurveMeasurement | None) -> dict | None:
    """The overfit run's loss against its step: the fitted drop, the slope and its standard error."""
    if curve is None or curve.error or len(curve.losses) < 5 or not all(math.isfinite(x) for x in curve.losses):
        return None
    fit = stats.linregress(np.arange(len(curve.losses)), curve.losses)
    return {"slope": float(fit.slope), "stderr": float(fit.stderr), "initial": curve.losses[0],
            "final": curve.losses[-1], "steps": len(curve.losses),
            "drop": float(-fit.slope * (len(curve.losses) - 1))}


def _sweep_part(sweep: SweepMeasurement | None) -> tuple[str, dict] | None:
    if sweep is None:
        return None
    s = sweep_summary(sweep)
    best, conf = s["best_lr"], sweep.configured
    if best is None or conf <= 0 or s["configured_loss"] is None or not math.isfinite(s["configured_loss"]):
        return None
    gain_best = s["initial"] - s["best_loss"]
    gain_conf = s["initial"] - s["configured_loss"]
    if conf >= best / 10 or gain_conf >= 0.05 * gain_best:
        return None
    steps = len(sweep.losses[0]) - 1 if sweep.losses else 0
    return (f"in the {steps}-step sweep from one start it lowers the loss by {max(gain_conf, 0):.3g} nats where "
            f"{best:.3g} lowers it by {gain_best:.3g}", {"sweep_best_lr": best, "sweep_gain_configured": gain_conf,
                                                         "sweep_gain_best": gain_best, "sweep_steps": steps})


def _hints(active: list[GroupRate], curve: CurveMeasurement | None, sweep: SweepMeasurement | None,
           total: int) -> list[Finding]:
    """What suggests a small rate without showing that nothing can learn: info, with the caveat."""
    parts: list[str] = []
    ev: dict = {}
    single = len(active) == 1
    big = [g for g in active if g.values >= MENTION * total]
    for g in big:
        r, s = _lost(g, curve)
        if s is not None and s >= LOST_INFO:
            at = f"{r:.3g}" if r is not None else "the rate the optimizer computes itself"
            parts.append(f"{g.dtype} rounding loses {s:.0%} of the update at {at}"
                         + ("" if single else f" in {_name(g, False)}"))
        if g.eps_share is not None and g.eps_share >= EPS_SHARE:
            parts.append(f"the optimizer's eps {g.eps:.1g} is above √v̂ for {g.eps_share:.0%} of the values with a "
                         "gradient" + ("" if single else f" in {_name(g, False)}")
                         + ", so eps, not the gradient, sets the size of their steps")
    zero = [g for g in active if (_used(g, curve)[0] == 0)]
    if zero:
        parts.append("the rate is 0 at every measured step" + _groups(zero, False))
    fit = _slope(curve)
    moving = curve is not None and curve.params_moved is not False
    if fit is not None and moving and fit["drop"] < FLAT_DROP * abs(fit["initial"]):
        still = abs(fit["slope"]) <= 2 * fit["stderr"]
        parts.append(f"over {fit['steps']} updates on one batch at the configured settings the loss goes from "
                     f"{fit['initial']:.4g} to {fit['final']:.4g} (slope {fit['slope']:.2g} ± {fit['stderr']:.1g} per "
                     f"update{', indistinguishable from zero' if still else ''})")
        ev["overfit_slope"] = fit
    sw = _sweep_part(sweep)
    if sw is not None:
        parts.append(sw[0])
        ev.update(sw[1])
    if not parts:
        return []
    main = max(active, key=lambda g: g.values) if active else None
    conf = main.configured_lr if main is not None else (sweep.configured if sweep is not None else None)
    ratio = main.ratio if main is not None else None
    moves = f"each update moves the weights by {ratio:.2g} of their norm; " if ratio else ""
    own = main is not None and _own_rate(main)
    subject = ("the learning rate the optimizer computes itself (a relative step)" if own
               else f"the configured learning rate{f' {conf:.3g}' if conf else ''}")
    raise_it = "give the optimizer a fixed rate and raise it 3× at a time" if own else "raise the rate 3× at a time"
    return [make("optim.lr_too_small", "info", "optimizer",
                 f"{subject} may be small: " + "; ".join(parts)
                 + f". But {CAVEAT}, and fine-tuning a pretrained model at a small rate is usual", CHECK,
                 hint=f"{moves}judge the rate on the real run: if its training loss stays flat for hundreds of "
                      f"steps, {raise_it}",
                 configured_lr=conf, caveat=CAVEAT, groups=[_evidence(g, _rate(g, curve)) for g in active], **ev)]


def judge_rates(u: UpdateMeasurement | None, curve: CurveMeasurement | None = None,
                sweep: SweepMeasurement | None = None) -> list[Finding]:
    """`optim.lr_too_small`: an error where no learning can happen at the configured settings, else at
    most an info that states its numbers and what a short run cannot show."""
    groups: Sequence[GroupRate] = u.groups if u is not None else []
    active = [g for g in groups if g.with_grad > 0]
    total = sum(g.values for g in active)
    if active and total:
        found = _zero_rate(active, curve, total)
        if found:
            return found
        found = _below_resolution(active, curve, total)
        if found:
            return found
    elif curve is not None and curve.step_lrs and all(r == 0 for s in curve.step_lrs for r in s):
        return [make("optim.lr_too_small", "error", "optimizer",
                     f"the learning rate is 0 in every group at every one of the {len(curve.step_lrs)} optimizer steps "
                     "of the overfit run: no parameter can learn", CHECK,
                     hint="print the rate handed to the optimizer and scheduler.get_last_lr() for the first steps",
                     steps=len(curve.step_lrs))]
    return _hints(active, curve, sweep, total)
