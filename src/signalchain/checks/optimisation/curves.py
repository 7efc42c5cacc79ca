"""Judge short training runs: the overfit test (is the path connected?), the LR sweep (where does
the loss diverge?), spikes, explosions. Whether a rate is too small is `rates.judge_rates`'s: a short
run cannot show it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...findings import Finding, Severity
from ...records.optimisation import CurveMeasurement, SweepMeasurement
from ..base import make
from .sweep import judge_sweep, sweep_summary

__all__ = ["judge_overfit", "judge_flat_loss", "judge_curve_stability", "judge_sweep", "CONNECTIONS", "RATE_IDS",
           "sweep_summary", "needs_refit", "overfit_target", "memorised", "FLAT_SHARE", "CAVEAT",
           "curve_shape", "PLATEAU"]

CHECK = "checks.training"
CAVEAT = ("a short run on one batch cannot show that a rate is too small for a long run: over a few steps "
          "larger rates always look better (short-horizon bias)")

#: The five connections the overfit test proves (the method's list), and the findings that break each.
CONNECTIONS: dict[str, tuple[str, ...]] = {
    "targets contain learnable information": (
        "targets.random",
        "targets.constant",
        "targets.misaligned",
        "mask.empty",
        "batch.size_mismatch",
        "shape.mismatch",
    ),
    "the loss depends on the predictions": ("loss.independent_of_output", "loss.stale_predictions"),
    "gradients reach trainable parameters": (
        "grad.missing",
        "grad.detached",
        "dtype.path_broken",
        "grad.zero",
        "optim.param_frozen",
    ),
    "the optimiser updates those parameters": (
        "optim.step_skipped",
        "optim.param_not_in_optimizer",
        "amp.steps_skipped",
        "optim.lr_too_small",  # an error only where no update can happen: a zero rate, updates lost to rounding
    ),
}
#: A loss has fallen over a third of a run when it dropped by at least this share of its start.
FELL = 0.02
#: A curve has stopped falling (a plateau) when its last third falls by less than this share of what
#: its first third fell: capacity needs a plateau, not slow progress.
PLATEAU = 0.15
#: A rate that merely differs from the sweep's best is not a broken connection: the overfit is re-run
#: at other rates instead, and memorising at any of them answers the test's question.
RATE_IDS = ("optim.lr_too_small", "optim.lr_too_large")


def _broken(prior: Sequence[Finding]) -> dict[str, list[Finding]]:
    """Connections broken by an error finding (warnings are context, not a broken connection)."""
    out: dict[str, list[Finding]] = {}
    for name, ids in CONNECTIONS.items():
        hits = [f for f in prior if f.id in ids and f.severity is Severity.ERROR]
        if hits:
            out[name] = hits
    return out


def overfit_target(c: CurveMeasurement) -> float:
    """Passing: the loss falls by half and below the unigram entropy of the targets (which a model
    that ignores its context and condition can reach, and no further)."""
    l0 = c.losses[0]
    return min(0.5 * l0, c.unigram_entropy - 0.25) if c.unigram_entropy is not None else 0.5 * l0


def memorised(losses: Sequence[float], target: float) -> bool:
    """The last five losses reach the target, all finite."""
    tail = list(losses[-5:])
    return bool(tail) and all(math.isfinite(x) for x in tail) and min(tail) <= target


def needs_refit(c: CurveMeasurement, prior: Sequence[Finding], sweep: SweepMeasurement | None) -> float | None:
    """The first rate to re-run the overfit at (the sweep's best), whenever the configured settings
    failed to memorise one batch with every connection intact and a finite loss; else None."""
    if c.error or not c.losses or sweep is None:
        return None
    if not all(math.isfinite(x) for x in c.losses[-5:]) or memorised(c.losses, overfit_target(c)):
        return None
    if _broken(prior):
        return None
    best = sweep_summary(sweep)["best_lr"]
    return float(best) if best is not None else None


def _refits(c: CurveMeasurement) -> list[tuple[float, list[float]]]:
    return list(zip(c.refit_lrs, c.refit_losses))


def _schedule_note(c: CurveMeasurement, configured: float | None) -> tuple[str, float | None, float | None]:
    """How the configured settings' rate moved during the overfit run (the schedule at work)."""
    rates = [max((r for r in s if r is not None), default=0.0) for s in c.step_lrs] or list(c.lrs)
    if not rates:
        return "", None, None
    lo, hi = min(rates), max(rates)
    if configured and hi < 0.5 * configured:
        return (f", its schedule's rate rising only from {lo:.3g} to {hi:.3g} over these steps (a warm-up)"
                if hi > lo else f", its schedule holding the rate at {hi:.3g}"), lo, hi
    if hi > 1.5 * lo:
        return f", its schedule's rate between {lo:.3g} and {hi:.3g}", lo, hi
    return "", lo, hi


def _connected(c: CurveMeasurement, fit: tuple[float, list[float]], target: float, drop: str,
               sweep: SweepMeasurement | None, evidence: dict) -> list[Finding]:
    """One batch memorises at a re-fit rate: the path is connected. The configured settings' own curve
    is reported beside it; it is evidence that the rate is too large only when a lower rate memorises
    and the configured one makes no progress at all."""
    lr, losses = fit
    configured = sweep.configured if sweep is not None else None
    note, lo, hi = _schedule_note(c, configured)
    conf = f"lr {configured:.3g}" if configured else "the configured rate"
    reached = min(losses[-5:])
    out = [make("overfit.configured_rate", "info", "optimizer",
                f"one fixed batch memorises at lr {lr:.3g} (plain updates, no schedule: loss {losses[0]:.3f} → "
                f"{reached:.3f} in {len(losses) - 1} steps, needed ≤ {target:.3f}), so targets, loss, gradients and "
                f"updates are connected. At the configured settings ({conf}{note}) the loss goes {drop} in {c.steps} "
                f"steps; {CAVEAT}", CHECK,
                hint="nothing is disconnected; judge the configured rate on the real run's loss curve"
                     + (" (a long warm-up keeps the rate low in the first steps, as intended)"
                        if configured and hi is not None and hi < 0.5 * configured else ""),
                refit_lr=lr, refit_reached=reached, configured_lr=configured, schedule_low=lo, schedule_high=hi,
                **evidence)]
    l0, end = c.losses[0], evidence["final"]
    if hi is not None and hi > 3 * lr and math.isfinite(end) and end >= 0.95 * l0:
        out.append(make("optim.lr_too_large", "warning", "optimizer",
                        f"at the configured settings (rates up to {hi:.3g}) one batch makes no progress in {c.steps} "
                        f"steps (loss {drop}), while at the lower {lr:.3g} it memorises ({reached:.3f})", CHECK,
                        hint=f"lower the rate towards {lr:.2g} or add warm-up, then overfit again", rate=hi,
                        refit_lr=lr))
    return out


def judge_overfit(
    c: CurveMeasurement, prior: Sequence[Finding], sweep: SweepMeasurement | None = None
) -> list[Finding]:
    """Is the path from targets to parameters connected? The loss on one fixed batch must fall well
    below what token frequencies alone explain, at the configured settings or at any re-fit rate.

    When it does at none: name the broken connection; with every connection intact, the model's
    capacity. When only a re-fit rate memorises: the path is connected (no error), and the
    configured settings' own curve is reported beside it (`overfit.configured_rate`, info).
    """
    if c.error:
        return [make("overfit.failed", "error", "loss", f"training on the golden batch crashed: {c.error}", CHECK,
                     hint="the update path raises; run one train step by hand to see the traceback", error=c.error)]
    if not c.losses:
        return []
    l0 = c.losses[0]
    finite = [x for x in c.losses if math.isfinite(x)]
    end = min(c.losses[-5:]) if all(math.isfinite(x) for x in c.losses[-5:]) else math.nan
    floor = c.unigram_entropy
    target = overfit_target(c)
    if math.isfinite(end) and end <= target:
        return []
    broken = _broken(prior)
    evidence = {"initial": l0, "final": end, "target": target, "unigram_entropy": floor, "steps": c.steps,
                "losses": c.losses, "connections": {n: [f.id for f in fs] for n, fs in broken.items()},
                "regularisation_off": c.regularisation}
    drop = f"from {l0:.3f} to {end:.3f}" if math.isfinite(end) else f"from {l0:.3f} to a non-finite value"
    if broken:
        first = next(iter(broken.values()))[0]
        names = "; ".join(f"{n} ✗ ({', '.join(sorted({f.id for f in fs}))})" for n, fs in broken.items())
        return [
            make(
                "overfit.failed",
                "error",
                first.stage,
                f"one fixed batch does not overfit in {c.steps} steps (loss {drop}, needed ≤ {target:.3f}); "
                f"broken: {names}",
                CHECK,
                hint=f"fix {first.id} at {first.stage} first: {first.hint}",
                **evidence,
            )
        ]
    if not finite or not math.isfinite(end):
        return [
            make(
                "overfit.failed",
                "error",
                "loss",
                f"the loss became non-finite while overfitting one batch ({drop})",
                CHECK,
                hint="see the numerics family: find the first non-finite value",
                **evidence,
            )
        ]
    refits = _refits(c)
    if refits:
        evidence["refits"] = [{"lr": lr, "losses": ls} for lr, ls in refits]
    fit = next(((lr, ls) for lr, ls in refits if memorised(ls, target)), None)
    if fit is not None:
        return _connected(c, fit, target, drop, sweep, evidence)
    tried = ", ".join(f"{lr:.3g} ({min(ls[-5:]):.3f})" if ls and all(math.isfinite(x) for x in ls[-5:])
                      else f"{lr:.3g} (non-finite)" for lr, ls in refits)
    rate_note = f"; re-fit at {tried} it does not memorise either" if refits else ""
    runs = [("the configured settings", None, c.losses)] + [(f"lr {lr:.3g}", lr, ls) for lr, ls in refits]
    shapes = [(name, lr, ls, curve_shape(ls)) for name, lr, ls in runs]
    evidence["shapes"] = [{"run": name, "lr": lr, "shape": sh[0], "first_third_drop": sh[1],
                           "last_third_drop": sh[2]} for name, lr, _, sh in shapes]
    plateau = [z for z in shapes if z[3][0] == "plateau"]
    falling = [z for z in shapes if z[3][0] == "falling"]
    if not plateau and falling:
        return [_unfinished(c, falling, target, drop, rate_note, evidence)]
    where = ""
    stop = end
    if plateau:
        name, _, ls, (_, first, last) = min(plateau, key=lambda z: min(z[2]))
        stop = min(ls)
        where = (f" at {name} the loss stopped falling at {stop:.3f} (its last third fell by {last:.3f} nats against "
                 f"{first:.3f} in its first)")
    return [
        make(
            "overfit.failed",
            "error",
            "model",
            f"one fixed batch does not overfit in {c.steps} steps (loss {drop}, needed ≤ {target:.3f}) although "
            f"targets, loss, gradients and updates are all connected{rate_note}"
            + (f";{where}" if plateau else "; at no rate tried does the loss fall"),
            CHECK,
            hint="the model cannot represent even this tiny task: check its width/depth and that its context "
            "and condition reach the output" if plateau else
            "nothing found disconnects the path, yet no update lowers the loss: run one update by hand and compare "
            "the loss before and after",
            **evidence,
        ),
    ] + ([
        make(
            "model.capacity",
            "warning",
            "model",
            f"with every connection intact,{where} (unigram entropy {floor:.3f} nats)"
            if floor is not None
            else f"with every connection intact,{where}",
            CHECK,
            hint="increase capacity (dim, layers) or shorten the sequences, then overfit again",
            plateau=stop, **evidence,
        ),
    ] if plateau else [])


def _unfinished(c: CurveMeasurement, falling: list, target: float, drop: str, rate_note: str,
                evidence: dict) -> Finding:
    """No rate memorised, but the loss is still falling at some: connected, and too few steps to tell."""
    name, _, ls, (_, first, last) = min(falling, key=lambda z: min(z[2]))
    floor = c.unigram_entropy
    trained = (f"; its first loss {c.losses[0]:.3f} is already below the targets' unigram entropy {floor:.3f}: "
               "the model starts trained" if floor is not None and c.losses[0] < floor else "")
    return make("overfit.unfinished", "info", "model",
                f"one fixed batch does not memorise in {c.steps} steps at any rate tried (the configured settings: "
                f"loss {drop}, needed ≤ {target:.3f}{rate_note}), but its loss is still falling: at {name} it goes "
                f"from {ls[0]:.3f} to {min(ls[-5:]):.3f}, its last third falling by {last:.3f} nats against "
                f"{first:.3f} in its first (no plateau){trained}. The loss answers every update, so targets, loss, "
                f"gradients and updates are connected; {c.steps} steps are too few to tell whether the model could "
                "memorise it, so no capacity verdict", CHECK,
                hint="nothing is disconnected; a trained start or a few adapters move one batch's loss slowly: for a "
                     "longer overfit run, use `--budget full`", **evidence)


def curve_shape(losses: Sequence[float]) -> tuple[str, float, float]:
    """("plateau" | "falling" | "flat", drop over the first third, drop over the last third) of the
    best-so-far loss (a spike is no progress). A plateau fell first, then stopped falling."""
    if len(losses) < 7 or not all(math.isfinite(x) for x in losses):
        return "flat", 0.0, 0.0
    best = np.minimum.accumulate(np.asarray(losses, dtype=float))
    third = (len(best) - 1) // 3
    first, last = float(best[0] - best[third]), float(best[2 * third] - best[-1])
    fell = FELL * abs(float(best[0]))
    if first < fell:
        return ("falling" if last >= fell else "flat"), first, last
    return ("plateau" if last < PLATEAU * first else "falling"), first, last


def _rate_to_blame(c: CurveMeasurement, sweep: SweepMeasurement | None) -> str | None:
    """Why the learning rate explains instability, if it does: it grows, or it is above the best."""
    if len(c.lrs) >= 2 and c.lrs[0] > 0 and max(c.lrs) > 4 * c.lrs[0] and c.lrs[-1] >= max(c.lrs) * 0.5:
        return f"the learning rate grows from {c.lrs[0]:.3g} to {max(c.lrs):.3g} during the run (the schedule)"
    best = sweep_summary(sweep)["best_lr"] if sweep is not None else None
    if best is not None and sweep is not None and sweep.configured > 1.5 * best:
        return f"the configured learning rate {sweep.configured:.3g} is above the sweep's best {best:.3g}"
    return None


def judge_curve_stability(c: CurveMeasurement, sweep: SweepMeasurement | None = None) -> list[Finding]:
    """Spikes in the loss and explosions of the gradient norm during a run at the configured settings.

    They are blamed on the optimizer when the learning rate explains them, else on the loss/gradients.
    """
    out: list[Finding] = []
    blame = _rate_to_blame(c, sweep)
    stage = "optimizer" if blame else "loss"
    losses = np.array(c.losses, dtype=float)
    if losses.size >= 4 and np.isfinite(losses).all():
        best = np.minimum.accumulate(losses)
        rise = losses[1:] - best[:-1]
        i = int(np.argmax(rise))
        if rise[i] > max(1.0, 0.25 * best[i]):
            out.append(
                make(
                    "loss.spike",
                    "warning",
                    stage,
                    f"the loss jumps from {best[i]:.3f} to {losses[i + 1]:.3f} at step {i + 1} of {losses.size}"
                    + (f"; {blame}" if blame else ""),
                    CHECK,
                    hint="lower the learning rate or add warm-up; log the gradient norm around the spike",
                    step=i + 1,
                    before=float(best[i]),
                    after=float(losses[i + 1]),
                )
            )
    norms = np.array(c.grad_norms, dtype=float)
    if norms.size >= 3:
        head = float(np.median(norms[: max(2, norms.size // 5)]))
        if not np.isfinite(norms).all() or (head > 0 and float(norms.max()) > 100 * head):
            bad = "non-finite" if not np.isfinite(norms).all() else f"{float(norms.max()):.3g} (from {head:.3g})"
            out.append(
                make(
                    "grad.exploding",
                    "error",
                    "optimizer" if blame else "grad",
                    f"the total gradient norm grows to {bad} within {norms.size} steps"
                    + (f"; {blame}" if blame else ""),
                    CHECK,
                    hint="lower the learning rate, clip gradients, and check for a schedule that raises the rate",
                    norms=norms.tolist(),
                )
            )
    return out


#: A loss that moves by less than this share of its size over a whole run has not moved at all
#: (float32 rounding of an unchanged value is ~1e-7 of it).
FLAT_SHARE = 1e-6


def judge_flat_loss(c: CurveMeasurement, prior: Sequence[Finding] = ()) -> list[Finding]:
    """The loss on one fixed batch stays exactly where it started for every update: nothing the update
    does reaches the loss. Whether the parameters moved says which half of the path is cut. A rate at
    which nothing can learn (an `optim.lr_too_small` error) already explains it."""
    finite = [x for x in c.losses if math.isfinite(x)]
    if c.error or len(finite) < 3 or len(finite) < len(c.losses):
        return []
    if any(f.id == "optim.lr_too_small" and f.severity is Severity.ERROR for f in prior):
        return []
    span = max(finite) - min(finite)
    if span > FLAT_SHARE * max(1.0, abs(finite[0])):
        return []
    if c.params_moved:
        why, hint = (", although the parameters changed: the loss does not read what the update moves",
                     "look for a loss computed from a cached or detached tensor, or from the targets alone")
    elif c.params_moved is False:
        why, hint = (", and no parameter changed: no update reaches the model",
                     "check that optimizer.step() runs, the learning rate is not zero and the trained "
                     "parameters are the optimizer's")
    else:
        why, hint = "", "compare the parameters before and after one update"
    return [make("loss.flat", "warning", "loss",
                 f"the loss stayed at {finite[0]:.6g} for all {len(finite)} updates on the golden batch "
                 f"(it moved by {span:.3g}){why}", CHECK, hint=hint,
                 initial=finite[0], span=span, steps=len(finite), params_moved=c.params_moved)]
