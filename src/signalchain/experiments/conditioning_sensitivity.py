"""Does the caption reach the logits? The logits of a fresh (or briefly trained) model with each row's
caption kept, swapped for another row's, and emptied, measured row by row against the change the
same step makes with nothing changed; upcast to float32 when the model's own dtype cannot resolve it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._tensor import to_numpy
from ..pipeline import Pipeline
from ..probes.op_recorder import OpRecorder
from ..records.conditioning import Sensitivity
from ..trace.layout import canonical_logits
from ._seed import seed_everything
from .conditioning import _grab, rolled
from .context import Context
from .optimisation._train import update_step

__all__ = ["measure_sensitivity"]

def _canonical(logits: Any, batch: int, got: dict[str, tuple[Any, dict]]) -> np.ndarray | None:
    """Logits as [B, K, T, V] (HF's [B*K, T, V] included): row i is example i. K from the tokens tap."""
    x = np.asarray(logits)
    tokens = got.get("tokens", (None, {}))[0]
    k = int(np.shape(tokens)[1]) if tokens is not None and np.ndim(tokens) == 3 else None
    if x.ndim == 2 and x.shape[0] == batch:  # [B, V]: one prediction per example
        return x[:, None, None, :]
    if x.ndim == 3 and x.shape[0] == batch:
        return x[:, None]  # [B, T, V]: one codebook (a symbolic model)
    return canonical_logits(x, batch, k)


def _row_changes(a: np.ndarray, b: np.ndarray, rows: list[int], scale: float) -> float:
    """The largest per-row mean |a - b| / scale over `rows` (rows of [B, ...] arrays)."""
    if not rows or a.shape != b.shape:
        return float("nan")
    return max(float(np.abs(a[i].astype(np.float64) - b[i]).mean()) / scale for i in rows)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    z = np.where(np.isfinite(z), z, -1e30)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _row_tv(a: np.ndarray, b: np.ndarray, rows: list[int]) -> float:
    """Mean total-variation distance between softmax(a) and softmax(b) per predicted position, over `rows`:
    the probability that a sampler with the same random draw picks a different token there."""
    if not rows or a.shape != b.shape:
        return float("nan")
    return float(np.mean([0.5 * np.abs(_softmax(a[i]) - _softmax(b[i])).sum(-1).mean() for i in rows]))


def _pooled(got: dict[str, tuple[Any, dict]]) -> np.ndarray | None:
    """[B, D]: each row's condition embedding averaged over its real positions (condition.mask)."""
    emb = got.get("condition.embedding", (None, {}))[0]
    if emb is None or np.ndim(emb) not in (2, 3):
        return None
    e = np.asarray(emb, dtype=np.float64)
    if e.ndim == 2:
        return e
    mask = got.get("condition.mask", (None, {}))[0]
    m = (
        np.asarray(mask, dtype=bool)
        if mask is not None and np.shape(mask) == e.shape[:2]
        else np.ones(e.shape[:2], bool)
    )
    m = m | ~m.any(axis=1, keepdims=True)  # a row with no real position: all of it
    return (e * m[..., None]).sum(1) / m.sum(1, keepdims=True)


def _embedding_change(
    base: dict[str, tuple[Any, dict]], got: dict[str, tuple[Any, dict]], rows: list[int]
) -> float | None:
    """Largest relative change |E' - E| / |E| of a row's condition embedding; position by position when both
    have the same shape, else of the rows' pooled embeddings (another caption tokenises to another length)."""
    emb0, emb = base.get("condition.embedding", (None, {}))[0], got.get("condition.embedding", (None, {}))[0]
    if emb0 is None or emb is None or not rows:
        return None
    if np.shape(emb) == np.shape(emb0):
        a, b = np.asarray(emb0, dtype=np.float64), np.asarray(emb, dtype=np.float64)
    else:
        a, b = _pooled(base), _pooled(got)
        if a is None or b is None or a.shape != b.shape:
            return None
    return max(float(np.linalg.norm(b[i] - a[i])) / max(float(np.linalg.norm(a[i])), 1e-12) for i in rows)


def _eps(dtype: Any) -> float:
    try:
        return float(torch.finfo(dtype).eps) if isinstance(dtype, torch.dtype) else float(np.finfo(dtype).eps)
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).eps)


def measure_sensitivity(ctx: Context, steps: int = 0) -> Sensitivity:
    """Golden batch: true captions, each row given another row's caption, all captions empty; on a fresh
    model, or after `steps` updates on the golden batch (a fusion gate that starts at zero, as in
    Flamingo-style gated cross-attention, ignores the condition until it has been trained).

    Also a control: the true captions set again through `with_captions`, the same seed (what the logits
    move by when nothing changes: the floor a response must clear), and the logits' dtype precision.

    When the logits are low precision (autocast to bf16 or fp16), their rounding (the floor is 8 eps:
    0.06 of the logits' spread in bf16) hides the small response of a fresh model's cross-attention.
    The measurement is then repeated on the same model with every low-precision cast made float32
    (`OpRecorder(upcast=True)`: the same ops, in full precision), and that one is judged."""
    p = ctx.pipeline
    batch = ctx.batch()
    model = ctx.fresh_model()
    if steps:
        optimizer = p.build_optimizer(model)
        for _ in range(steps):
            seed_everything(ctx.seed)
            update_step(p, model, optimizer, batch)
    model.eval()
    low = _sensitivity(p, model, batch, ctx.seed, steps)
    if low.error is not None or low.eps <= float(np.finfo(np.float32).eps):
        return low
    with OpRecorder(upcast=True):
        full = _sensitivity(p, model, batch, ctx.seed, steps)
    if full.error is not None:
        return low
    full.steps, full.upcast_from = steps, _dtype_name(low.eps)
    return full


def _dtype_name(eps: float) -> str:
    for dt in (torch.bfloat16, torch.float16):
        if eps == float(torch.finfo(dt).eps):
            return str(dt).removeprefix("torch.")
    return f"eps {eps:.1g}"


def _sensitivity(p: Pipeline, model: Any, batch: Any, seed: int, steps: int = 0) -> Sensitivity:
    """The measurement of `measure_sensitivity` on a prepared model."""
    base, out = _grab(p, model, batch, seed, stop=False)
    if "caption" not in base:
        return Sensitivity(0, {}, {}, error="the step does not tap `caption`")
    captions = list(base["caption"][0])
    raw0 = (
        base["logits"][0]
        if "logits" in base
        else (to_numpy(out.logits) if out is not None and out.logits is not None else None)
    )
    if raw0 is None:
        return Sensitivity(0, {}, {}, error="the step returns no logits and taps none")
    logits0 = _canonical(raw0, len(captions), base)
    if logits0 is None:
        return Sensitivity(0, {}, {}, error=f"logits {list(np.shape(raw0))} cannot be read per example for a batch "
                                            f"of {len(captions)} (not [B, K, T, V], [B*K, T, V] or [B, T, V])")
    dtype = base.get("logits", (None, {}))[1].get("_dtype") or (out.logits.dtype if out is not None and
                                                                 isinstance(out.logits, torch.Tensor) else raw0.dtype)
    dropped0 = (
        np.asarray(base["condition.dropped"][0], dtype=bool)
        if "condition.dropped" in base
        else np.zeros(len(captions), bool)
    )
    l_scale = float(np.std(logits0)) or 1.0
    emb_change, logit_change, tv, rows_used = {}, {}, {}, 0
    control = float("nan")
    kept = [i for i in range(len(captions)) if not dropped0[i]]
    for name, caps in (("same caption", captions), ("other caption", rolled(captions)),
                       ("null caption", [""] * len(captions))):
        got, out = _grab(p, model, p.with_captions(batch, caps), seed, stop=False)
        raw = got["logits"][0] if "logits" in got else to_numpy(out.logits)
        logits = _canonical(raw, len(captions), got)
        if logits is None:
            continue
        dropped = np.asarray(got["condition.dropped"][0], dtype=bool) if "condition.dropped" in got else dropped0
        if name == "same caption":
            control = _row_changes(logits0, logits, kept, l_scale)
            continue
        rows = [i for i in range(len(captions)) if caps[i] != captions[i] and not dropped0[i] and not dropped[i]]
        rows_used = max(rows_used, len(rows))
        logit_change[name] = _row_changes(logits0, logits, rows, l_scale)
        tv[name] = _row_tv(logits0, logits, rows)
        change = _embedding_change(base, got, rows)
        if change is not None:
            emb_change[name] = change
    return Sensitivity(rows=rows_used, embedding_change=emb_change, logits_change=logit_change, steps=steps,
                       control=control, eps=_eps(dtype), tv=tv, positions=int(np.prod(logits0.shape[1:-1])))
