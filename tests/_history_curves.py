"""Synthetic runs for the history judges: clean ones in many conventions, and each fault planted at a
known step. A clean run's loss is a decaying exponential with multiplicative noise; what varies is how
users log it (every step or every 50, an epoch axis, fp16 skips, evaluations, warm-up, resumes)."""

from __future__ import annotations

import math

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
