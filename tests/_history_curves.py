"""Synthetic runs for the history judges: clean ones in many conventions, and each fault planted at a
known step. A clean run's loss is a decaying exponential with multiplicative noise; what varies is how
users log it (every step or every 50, an epoch axis, fp16 skips, evaluations, warm-up, resumes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from signalchain.history.roles import assign
from signalchain.records.history import RunHistory, Series

CONVENTIONS = (
    "per_step_cosine",
    "every_50_constant",
    "linear_decay_eval",
    "step_decay",
    "fp16_skips",
    "resumed_correctly",
    "epoch_axis",
    "tiny_batch_noisy",
    "finetune_gentle",
    "dropout_valid_below",
    "codebooks",
    "slight_rise_at_end",
    "eval_and_checkpoint_pauses",
)


def lr_schedule(n: int, kind: str, peak: float = 3e-4, warmup: int = 0) -> np.ndarray:
    t = np.arange(n, dtype=float)
    if kind == "constant":
        lr = np.full(n, peak)
    elif kind == "cosine":
        lr = peak * 0.5 * (1 + np.cos(np.pi * np.clip((t - warmup) / max(n - warmup, 1), 0, 1)))
    elif kind == "linear":
        lr = peak * np.clip(1 - (t - warmup) / max(n - warmup, 1), 0, 1)
    elif kind == "step":
        lr = np.where(t < 2 * n // 3, peak, peak * 0.1)
    else:
        raise ValueError(kind)
    if warmup:
        lr[:warmup] = peak * (t[:warmup] + 1) / warmup
    return lr


def loss_curve(
    n: int,
    rng: np.random.Generator,
    start: float = 6.0,
    end: float = 3.0,
    tau: float | None = None,
    noise: float = 0.05,
) -> np.ndarray:
    t = np.arange(n, dtype=float)
    tau = tau or n / 4
    return (end + (start - end) * np.exp(-t / tau)) * np.exp(rng.normal(0, noise, n))


def make_run(convention: str, seed: int = 0) -> RunHistory:
    rng = np.random.default_rng(seed)
    run = RunHistory(root=f"synthetic:{convention}", format="synthetic")
    every, n = 1, 400
    noise, start, end = 0.05, 6.0, 3.0
    lr_kind, warmup = "cosine", 20
    if convention == "every_50_constant":
        every, n, lr_kind, warmup = 50, 100, "constant", 0
    elif convention == "linear_decay_eval":
        lr_kind = "linear"
    elif convention == "step_decay":
        lr_kind, warmup = "step", 0
    elif convention == "tiny_batch_noisy":
        noise = 0.25
    elif convention == "finetune_gentle":
        start, end, lr_kind, warmup = 4.0, 3.8, "constant", 0
    steps = np.arange(1, n + 1) * every
    loss = loss_curve(n, rng, start, end, noise=noise)
    if convention == "slight_rise_at_end":
        loss[-n // 10 :] *= 1.02
    lr = lr_schedule(n, lr_kind, warmup=warmup)
    grad = 2.0 * np.exp(-np.arange(n) / n) * np.exp(rng.normal(0, 0.3, n))
    wall = 1.7e9 + np.cumsum(rng.uniform(0.9, 1.1, n) * every * 0.5)
    if convention == "eval_and_checkpoint_pauses":
        for i in range(n // 10, n, n // 10):
            wall[i:] += 30 * every * 0.5  # one slow interval each: an evaluation, a save
    if convention == "resumed_correctly":
        wall[n // 2 :] += 3600.0  # the job was requeued for an hour; everything was restored
    if convention == "fp16_skips":
        scale = np.full(n, 65536.0)
        for i in rng.choice(np.arange(5, n), size=8, replace=False):
            grad[i] = np.inf
            scale[i:] /= 2
        run.add(Series("loss_scale", steps, scale))
    run.add(Series("loss", steps, loss, wall=wall, epochs=steps / (n * every / 4)))
    run.add(Series("learning_rate", steps, lr))
    run.add(Series("grad_norm", steps, grad))
    run.add(Series("epoch", steps, steps / (n * every / 4)))
    ev = steps[9::10]
    level = loss_curve(n, np.random.default_rng(seed + 1000), start, end, noise=0.0)[9::10]
    factor = 0.95 if convention == "dropout_valid_below" else 1.03
    run.add(Series("eval_loss", ev, level * factor * np.exp(rng.normal(0, 0.01, len(ev)))))
    if convention == "codebooks":
        for k in range(4):
            run.add(Series(f"train/ce_q{k + 1}", steps, loss * (0.8 + 0.1 * k)))
    if convention == "epoch_axis":
        return epoch_run(seed)
    return assign(run)


def epoch_run(seed: int = 0, epochs: int = 8) -> RunHistory:
    """AudioCraft-like: per-epoch averages of train and valid CE, per codebook."""
    rng = np.random.default_rng(seed)
    run = RunHistory(root="synthetic:epoch", format="synthetic", axis="epoch")
    e = np.arange(1, epochs + 1)
    ce = loss_curve(epochs, rng, 5.5, 3.5, tau=3.0, noise=0.01)
    run.add(Series("train/ce", e, ce))
    run.add(Series("valid/ce", e, ce * 1.05))
    run.add(Series("train/lr", e, np.full(epochs, 1e-4)))
    run.add(Series("train/grad_norm", e, 0.5 * np.exp(rng.normal(0, 0.1, epochs))))
    for k in range(4):
        run.add(Series(f"train/ce_q{k + 1}", e, ce * (0.85 + 0.1 * k)))
    return assign(run)


def clean_base(seed: int = 0, n: int = 400) -> tuple[RunHistory, dict[str, np.ndarray]]:
    """A per-step run to plant a fault in: its arrays, and a builder."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    arrays = {
        "steps": steps,
        "loss": loss_curve(n, rng),
        "lr": lr_schedule(n, "cosine", warmup=20),
        "grad": 2.0 * np.exp(rng.normal(0, 0.3, n)),
        "wall": 1.7e9 + np.cumsum(rng.uniform(0.45, 0.55, n)),
        "epoch": steps / 100.0,
    }
    return RunHistory(root="synthetic:fault", format="synthetic"), arrays


def build(run: RunHistory, a: dict[str, np.ndarray], valid: tuple[np.ndarray, np.ndarray] | None = None) -> RunHistory:
    run.add(Series("loss", a["steps"], a["loss"], wall=a["wall"]))
    run.add(Series("learning_rate", a.get("lr_steps", a["steps"]), a["lr"]))
    run.add(Series("grad_norm", a["steps"], a["grad"]))
    run.add(Series("epoch", a["steps"], a["epoch"]))
    if valid is not None:
        run.add(Series("eval_loss", *valid))
    return assign(run)


def ln(x: float) -> float:
    return math.log(x)


# --- generative clean runs: one recipe = one way of training and logging a healthy run -------------

SCHEDULER_NAMES = {"constant": "constant", "cosine": "cosine", "linear": "linear", "step": "StepLR", "wsd": "wsd"}


@dataclass(frozen=True)
class Recipe:
    """How a healthy run was trained and logged. Every field is a convention users have, none a fault."""

    points: int = 400  # logged training points
    every: int = 1  # optimiser steps between them
    lr_kind: str = "cosine"  # constant, cosine, linear, step, wsd (warm-up, stable, decay at the end)
    warmup_frac: float = 0.05
    warmup_from_zero: bool = False
    start: float = 6.0  # loss at the start
    end_frac: float = 0.5  # end level as a share of the start
    tau_frac: float = 0.25  # time constant of the fall, as a share of the run
    noise: float = 0.05  # multiplicative noise of a logged point (std of its log)
    heavy_tails: bool = False  # Student-t (10 degrees of freedom) instead of Gaussian noise
    rise_at_end: float = 0.0  # a cosine run's loss creeping up at the very end (share)
    eval_every: int = 10  # logged points between evaluations; 0: no evaluation
    valid_factor: float = 1.03  # validation level against training (< 1: dropout/augmentation)
    rounding: int | None = None  # decimals the log kept
    fp16_skips: int = 0  # skipped steps of an fp16 loss scaler (at most 1 point in 20)
    calibration: bool = False  # the scaler calibrating: its first points (up to 8) all skipped
    resume: str = "none"  # none, gap (requeued, all restored), back (reloaded an earlier checkpoint)
    codebooks: int = 0
    pauses: int = 0  # slow intervals on the clock (evaluations, saves)
    grad_trend: float = 0.0  # log-change of the gradient norm over the run
    with_config: bool = False  # the run saved its configuration (lr, scheduler, warm-up, V, steps/epoch)
    epochs: float = 4.0  # epochs the run covers (the epoch counter logged beside the loss)


def recipe_run(r: Recipe, seed: int = 0) -> RunHistory:
    rng = np.random.default_rng(seed)
    n, every = r.points, r.every
    t = np.arange(n, dtype=float)
    steps = (np.arange(n) + 1) * every
    end = r.start * r.end_frac
    level = end + (r.start - end) * np.exp(-t / max(1.0, n * r.tau_frac))
    if r.rise_at_end:
        level[-n // 10 :] *= 1 + r.rise_at_end * np.linspace(0, 1, len(level[-n // 10 :]))
    # heavy tails: Student-t with 10 degrees of freedom, at most 0.1 (heavier tails draw, now and then, a
    # single point 2-5x its level: a spike by any reading, which the judge reports as one)
    eps = rng.standard_t(10, n) * min(r.noise, 0.1) / np.sqrt(1.25) if r.heavy_tails else rng.normal(0, r.noise, n)
    loss = level * np.exp(eps)
    warmup = int(round(r.warmup_frac * n))
    kind = "constant" if r.lr_kind == "wsd" else r.lr_kind
    lr = lr_schedule(n, kind, warmup=warmup)
    if r.lr_kind == "wsd":
        d = max(2, n // 10)
        lr[-d:] = lr[-d - 1] * np.linspace(1, 0.01, d)
    if r.warmup_from_zero and warmup:
        lr[:warmup] = 3e-4 * t[:warmup] / warmup
    grad = 1.5 * np.exp(r.grad_trend * t / n) * np.exp(rng.normal(0, 0.3, n))
    wall = 1.7e9 + np.cumsum(rng.uniform(0.9, 1.1, n) * every * 0.4)
    for i in rng.choice(np.arange(1, n), size=min(r.pauses, n // 10), replace=False):  # at most 1 interval in 10
        wall[i:] += rng.uniform(5, 30) * every * 0.4
    epoch = steps / (n * every / r.epochs)
    scale = None
    if r.fp16_skips or r.calibration:
        scale = np.full(n, 65536.0)
        skips = list(rng.choice(np.arange(1, n), size=min(r.fp16_skips, n // 20), replace=False))
        for i in skips + (list(range(min(8, n // 2))) if r.calibration else []):
            grad[i] = np.inf
            scale[i:] /= 2
    idx = np.arange(n)
    if r.resume == "gap":
        wall[n // 2 :] += 3600.0
    elif r.resume == "back":
        a, b = int(n * 0.45), int(n * 0.6)
        idx = np.concatenate([np.arange(b), np.arange(a, n)])
        # the replayed steps: same model, new batches, the same noise
        redo = (
            rng.standard_t(10, n - a) * min(r.noise, 0.1) / np.sqrt(1.25)
            if r.heavy_tails
            else rng.normal(0, r.noise, n - a)
        )
        again = level[a:] * np.exp(redo)
        loss = np.concatenate([loss[:b], again])
        wall = np.concatenate([wall[:b], wall[b - 1] + 600 + (wall[a:] - wall[a])])
    if r.rounding is not None:
        loss = np.round(loss, r.rounding)
    run = RunHistory(root="synthetic:recipe", format="synthetic")
    run.add(Series("loss", steps[idx], loss, wall=wall))
    run.add(Series("learning_rate", steps[idx], lr[idx]))
    run.add(Series("grad_norm", steps[idx], grad[idx]))
    run.add(Series("epoch", steps[idx], epoch[idx]))
    if scale is not None:
        run.add(Series("loss_scale", steps[idx], scale[idx]))
    if r.eval_every:
        sel = np.arange(r.eval_every - 1, n, r.eval_every)
        val = level[sel] * r.valid_factor * np.exp(rng.normal(0, 0.01, len(sel)))
        if r.rounding is not None:
            val = np.round(val, r.rounding)
        run.add(Series("eval_loss", steps[sel], val))
    for k in range(r.codebooks):
        share = 0.7 + 0.15 * k
        run.add(Series(f"train/ce_q{k + 1}", steps[idx], loss * share * np.exp(rng.normal(0, 0.02, len(idx)))))
    if r.with_config:
        run.config.update(
            learning_rate=3e-4,
            lr_scheduler_type=SCHEDULER_NAMES[r.lr_kind],
            warmup_steps=warmup * every,
            vocab_size=int(round(math.exp(r.start / 0.9))),  # a fresh model starts a little under ln V
            steps_per_epoch=n * every / r.epochs,
        )
    return assign(run)


def recipes():
    """A hypothesis strategy over healthy recipes."""
    from hypothesis import strategies as st

    # a run whose whole fall is within three noises and done in its first 2 % of points, or done before its
    # second logged point, is not clean but ambiguous (a fall to a plateau at once is also what a broken
    # run that learns only token frequencies draws): left out
    return st.builds(
        Recipe,
        points=st.sampled_from([12, 20, 40, 100, 400, 1000]),
        every=st.sampled_from([1, 10, 50, 500]),
        lr_kind=st.sampled_from(["constant", "cosine", "linear", "step", "wsd"]),
        warmup_frac=st.sampled_from([0.0, 0.01, 0.05, 0.1]),
        warmup_from_zero=st.booleans(),
        start=st.floats(2.0, 8.0),
        end_frac=st.floats(0.4, 0.9),
        tau_frac=st.floats(0.02, 0.5),
        noise=st.floats(0.005, 0.3),
        heavy_tails=st.booleans(),
        rise_at_end=st.sampled_from([0.0, 0.0, 0.02]),
        eval_every=st.sampled_from([0, 2, 5, 10, 20]),
        valid_factor=st.floats(0.93, 1.15),
        rounding=st.sampled_from([None, None, 2, 4]),
        fp16_skips=st.sampled_from([0, 0, 3, 8]),
        calibration=st.booleans(),
        resume=st.sampled_from(["none", "gap", "back"]),
        codebooks=st.sampled_from([0, 4]),
        pauses=st.sampled_from([0, 3, 10]),
        grad_trend=st.floats(-1.5, 1.5),
        with_config=st.booleans(),
        epochs=st.sampled_from([1.0, 3.0, 10.0]),
    ).filter(lambda r: ((1 - r.end_frac) >= 3 * r.noise or r.tau_frac >= 0.05) and r.tau_frac * r.points >= 2)
