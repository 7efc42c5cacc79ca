"""What each logged series may be taken for (`Series.role`), across the conventions of our users' logs.

Names are matched after lower-casing, with the split taken from a prefix or suffix (`train/loss`,
`train_loss`, `loss/train`, `val_loss_epoch`, `eval_loss`, `valid/ce`) and Lightning's `_step`/`_epoch`
aggregation suffixes set aside (the `_step` series is the curve; an `_epoch` mean only when there is
no per-step one). A name that matches nothing keeps role None: shown on the page, never judged.
Perplexity, accuracy and runtimes get no role: the judges reason about the loss itself.
"""

from __future__ import annotations

import re

from ..records.history import RunHistory

__all__ = ["assign", "role_of"]

_TRAIN = ("train", "training", "tr")
_VALID = ("valid", "validation", "val", "eval", "evaluate", "test", "dev")
_LOSS = ("loss", "ce", "cross_entropy", "nll", "xent", "lm_loss")
_CODEBOOK = re.compile(r"^(?:ce|loss|nll|cross_entropy)_?(?:q|cb|codebook|k)_?(\d+)$")
_LR = re.compile(r"^(?:learning_rate|lr)(?:[-_/].*)?$")
_GRAD = ("grad_norm", "gradient_norm", "grad_norm_unclipped", "total_norm", "gnorm", "grad_norm_before_clip")
_SCALE = ("loss_scale", "grad_scale", "scale", "scaler_scale", "amp_scale")
_STEP_TIME = (
    "step_time",
    "time_per_step",
    "iter_time",
    "batch_time",
    "sec_per_step",
    "step_seconds",
    "seconds_per_step",
    "time/step",
)
_THROUGHPUT = (
    "samples_per_second",
    "samples_per_sec",
    "throughput",
    "it_per_sec",
    "steps_per_second",
    "tokens_per_second",
    "examples_per_second",
    "it/s",  # tqdm-style rates, as some loops log them
    "samples/s",
    "steps/s",
    "tokens/s",
)
#: Optimiser hyper-parameters Lightning's LearningRateMonitor logs beside the rate (`lr-Adam-momentum`):
#: they match the `lr-` prefix but are not the learning rate.
_NOT_LR = ("momentum", "beta", "weight_decay")
#: Folders that group a name without saying its split (`signalchain/ce/codebook_0`, `optim/lr`).
_GROUPS = ("signalchain", "metrics", "charts", "optim", "optimizer", "perf")


def _split(name: str) -> tuple[str | None, str]:
    """(split, metric) from `train/loss`, `loss/train`, `train_loss`, `eval_loss`, `val_loss_epoch`."""
    parts = [p for p in re.split(r"[/.]", name) if p]
    if len(parts) > 1:
        for i in (0, len(parts) - 1):
            if parts[i] in _TRAIN:
                return "train", "/".join(parts[:i] + parts[i + 1 :])
            if parts[i] in _VALID:
                return "valid", "/".join(parts[:i] + parts[i + 1 :])
        if parts[0] in _GROUPS:
            parts = parts[1:]
        # `ce/codebook_0` (signalchain's own tags) reads as `ce_codebook_0`; a name the join does not make
        # known is tried by its last part below (`grad_norm/total` stays unknown, `optim/lr` is the rate)
        name = "/".join(parts)
    for pre in _TRAIN:
        if name.startswith(pre + "_"):
            return "train", name[len(pre) + 1 :]
    for pre in _VALID:
        if name.startswith(pre + "_"):
            return "valid", name[len(pre) + 1 :]
    return None, name


def role_of(name: str) -> tuple[str | None, int | None, str]:
    """(role, codebook, aggregation) for a logged name; aggregation is "step", "epoch" or ""."""
    low = name.strip().lower()
    agg = ""
    for suffix in ("_step", "_epoch"):
        if low.endswith(suffix) and low != "global_step":
            low, agg = low[: -len(suffix)], suffix[1:]
            break
    split, metric = _split(low)
    metric = metric.strip("/")
    if metric in ("epoch",):
        return "epoch", None, agg
    m = _CODEBOOK.match(metric.replace("/", "_"))
    if m:
        return ("valid_codebook_loss" if split == "valid" else "train_codebook_loss"), int(m.group(1)), agg
    if metric in _LOSS:
        return ("valid_loss" if split == "valid" else "train_loss"), None, agg
    if split == "valid":
        return None, None, agg  # eval_runtime, val_acc...: shown, never judged
    role = _scalar_role(metric)
    last = metric.rsplit("/", 1)[-1]
    if role is None and "/" in metric and last != "scale":  # `attn/scale` is no loss scale
        role = _scalar_role(last)  # `optim/lr`, `perf/step_time`
    return role, None, agg


def _scalar_role(metric: str) -> str | None:
    if metric in _GRAD:
        return "grad_norm"
    if _LR.match(metric) and not any(w in metric for w in _NOT_LR):
        return "lr"
    if metric in _SCALE:
        return "loss_scale"
    if metric in _STEP_TIME:
        return "step_time"
    if metric in _THROUGHPUT:
        return "throughput"
    return None


def assign(run: RunHistory) -> RunHistory:
    """Set every series' role. Where two series would take one scalar role (Lightning's `train_loss_step`
    and `train_loss_epoch`, or `loss` beside `signalchain/loss`), the per-step one keeps it, then the
    one with the most points; the others lose the role (shown, not judged twice)."""
    claims: dict[tuple[str, int | None], list[tuple[int, int, int, str]]] = {}
    for s in run.series.values():
        role, cb, agg = role_of(s.name)
        s.role, s.codebook = None, None
        if role is None:
            continue
        rank = {"step": 0, "": 1, "epoch": 2}[agg]
        # the validation run every epoch before a final `test` pass or AudioCraft's sparser `evaluate` stage
        late = int(re.match(r"^(?:test|evaluate)\b", s.name.lower()) is not None)
        claims.setdefault((role, cb), []).append((rank, late, -len(s), s.name))
    for (role, cb), names in claims.items():
        keep = min(names)[-1]
        s = run.series[keep]
        s.role, s.codebook = role, cb
        # codebooks in logs are 1-based (`ce_q1`) or 0-based (`loss_cb0`); kept as the log numbers them
    lows = [s.codebook for s in run.series.values() if s.codebook is not None]
    if lows and min(lows) == 1:
        for s in run.series.values():
            if s.codebook is not None:
                s.codebook -= 1
    return run
