"""Judge short training runs: the overfit test (five connections), the LR sweep, spikes, explosions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...findings import Finding, Severity
from ...records.optimisation import CurveMeasurement, SweepMeasurement
from ..base import make

__all__ = ["judge_overfit", "judge_flat_loss", "judge_curve_stability", "judge_sweep", "CONNECTIONS", "RATE_IDS",
           "sweep_summary", "needs_refit", "overfit_target", "FLAT_SHARE"]

CHECK = "checks.training"

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
    ),
}
#: The learning rate is not a broken connection: the overfit is re-run at the sweep's best rate instead.
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


def needs_refit(c: CurveMeasurement, prior: Sequence[Finding], sweep: SweepMeasurement | None) -> float | None:
    """The learning rate to re-run the overfit at, when it failed with every connection intact and
    the configured rate is not the sweep's best; else None."""
    if c.error or not c.losses or sweep is None:
        return None
    end = min(c.losses[-5:]) if all(math.isfinite(x) for x in c.losses[-5:]) else math.nan
    if math.isfinite(end) and end <= overfit_target(c):
        return None
    if _broken(prior):
        return None
    best = sweep_summary(sweep)["best_lr"]
    if best is None or best / 3 <= sweep.configured <= best * 3:
        return None
    return float(best)


def judge_overfit(
    c: CurveMeasurement, prior: Sequence[Finding], sweep: SweepMeasurement | None = None
) -> list[Finding]:
    """The loss on one fixed batch must fall well below what token frequencies alone explain.

    When it does not: name the broken connection; with every connection intact, blame the learning
    rate if the sweep puts the configured one far from the best, else the model's capacity.
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
    best = sweep_summary(sweep)["best_lr"] if sweep is not None else None
    refit = [x for x in c.best_lr_losses if math.isfinite(x)]
    if best is not None and sweep is not None and refit and min(refit[-5:]) <= target:
        # At the sweep's best rate the same batch does overfit: the model can, the rate is wrong.
        fid = "optim.lr_too_large" if sweep.configured > best else "optim.lr_too_small"
        evidence["best_lr_losses"] = c.best_lr_losses
        return [
            make(
                "overfit.failed",
                "error",
                "optimizer",
                f"one fixed batch does not overfit in {c.steps} steps at the configured learning rate "
                f"{sweep.configured:.3g} (loss {drop}, needed ≤ {target:.3f}), but at the sweep's best {best:.3g} "
                f"it reaches {min(refit[-5:]):.3f}",
                CHECK,
                hint=f"use a learning rate near {best:.2g}",
                **evidence,
            ),
            make(
                fid,
                "warning",
                "optimizer",
                f"the configured learning rate {sweep.configured:.3g} does not fit one batch; {best:.3g} does",
                CHECK,
                hint=f"use a learning rate near {best:.2g}",
                **evidence,
            ),
        ]
    rate_note = ""
    if refit:
        evidence["best_lr_losses"] = c.best_lr_losses
        rate_note = f"; at the sweep's best learning rate {best:.3g} it still stops at {min(refit[-5:]):.3f}"
    return [
        make(
            "overfit.failed",
            "error",
            "model",
            f"one fixed batch does not overfit in {c.steps} steps (loss {drop}, needed ≤ {target:.3f}) although "
            f"targets, loss, gradients and updates are all connected{rate_note}",
            CHECK,
            hint="the model cannot represent even this tiny task: check its width/depth and that its context "
            "and condition reach the output",
            **evidence,
        ),
        make(
            "model.capacity",
            "warning",
            "model",
            f"with every connection intact the loss stops at {end:.3f} (unigram entropy {floor:.3f} nats)"
            if floor is not None
            else f"with every connection intact the loss stops at {end:.3f}",
            CHECK,
            hint="increase capacity (dim, layers) or shorten the sequences, then overfit again",
            **evidence,
        ),
    ]


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


def sweep_summary(s: SweepMeasurement) -> dict[str, float | None]:
    finals = [min(ls[-2:]) if ls and all(math.isfinite(x) for x in ls) else math.inf for ls in s.losses]
    ok = [i for i, f in enumerate(finals) if math.isfinite(f) and f < s.initial + 0.5]
    best = min(ok, key=lambda i: finals[i]) if ok else None
    diverge = next((s.lrs[i] for i in range(len(s.lrs)) if (best is None or i > best) and i not in ok), None)
    conf = s.lrs.index(s.configured) if s.configured in s.lrs else None
    return {
        "best_lr": s.lrs[best] if best is not None else None,
        "best_loss": finals[best] if best is not None else None,
        "diverge_lr": diverge,
        "configured_loss": finals[conf] if conf is not None else None,
        "initial": s.initial,
    }


def judge_sweep(s: SweepMeasurement) -> list[Finding]:
    """Place the configured learning rate against the best and the divergent ones."""
    summ = sweep_summary(s)
    best, diverge, conf = summ["best_lr"], summ["diverge_lr"], s.configured
    out: list[Finding] = []
    ev = {"lrs": s.lrs, "losses": s.losses, **summ, "configured_lr": conf}
    if best is None:
        return [make("optim.lr_too_large", "warning", "optimizer",
                     "no learning rate in the sweep lowered the loss: every one stalled or diverged", CHECK,
                     hint="the optimisation path may be broken; see the gradient findings", **ev)]
    gain_best = s.initial - float(summ["best_loss"] or s.initial)
    gain_conf = (
        s.initial - float(summ["configured_loss"])
        if summ["configured_loss"] is not None and math.isfinite(summ["configured_loss"])
        else -math.inf
    )
    if diverge is not None and conf >= diverge:
        out.append(make("optim.lr_too_large", "error", "optimizer",
                        f"the configured learning rate {conf:.3g} is at or above the rate where the loss diverges "
                        f"({diverge:.3g}); the best in the sweep is {best:.3g}", CHECK,
                        hint=f"use about {best:.2g} (or up to {best * 3:.2g} with warm-up)", **ev))
    elif conf > 10 * best and gain_conf < 0.5 * gain_best:
        out.append(
            make(
                "optim.lr_too_large",
                "warning",
                "optimizer",
                f"the configured learning rate {conf:.3g} is {conf / best:.0f}× the best in the sweep ({best:.3g}) "
                f"and gains {gain_conf:.3f} nats against {gain_best:.3f}",
                CHECK,
                hint=f"try {best:.2g}",
                **ev,
            )
        )
    elif conf < best / 10 and gain_conf < 0.25 * gain_best:
        out.append(make("optim.lr_too_small", "error" if gain_conf < 0.05 * gain_best else "warning", "optimizer",
                        f"the configured learning rate {conf:.3g} is {best / conf:.0f}× below the best in the sweep "
                        f"({best:.3g}); in {len(s.losses[0]) - 1} steps it lowers the loss by {max(gain_conf, 0):.4f} "
                        f"nats against {gain_best:.3f}", CHECK, hint=f"raise it towards {best:.2g}", **ev))
    return out


#: A loss that moves by less than this share of its size over a whole run has not moved at all
#: (float32 rounding of an unchanged value is ~1e-7 of it).
FLAT_SHARE = 1e-6


def judge_flat_loss(c: CurveMeasurement) -> list[Finding]:
    """The loss on one fixed batch stays exactly where it started for every update: nothing the update
    does reaches the loss. Whether the parameters moved says which half of the path is cut."""
    finite = [x for x in c.losses if math.isfinite(x)]
    if c.error or len(finite) < 3 or len(finite) < len(c.losses):
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
