"""Tensor helpers the probes share: flatten nested outputs, summarise a tensor, upcast low precision."""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["LOW_PRECISION", "flat_tensors", "tensor_stats", "upcast"]

LOW_PRECISION = (torch.float16, torch.bfloat16)


def flat_tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in flat_tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in flat_tensors(o)]
    return []


def upcast(obj: Any) -> Any:
    """float16/bfloat16 tensors and dtypes (also inside lists and tuples) as float32."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype in LOW_PRECISION else obj
    if isinstance(obj, torch.dtype):
        return torch.float32 if obj in LOW_PRECISION else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(upcast(o) for o in obj)
    return obj


def tensor_stats(t: torch.Tensor) -> dict[str, Any]:
    """Statistics of a tensor as plain numbers: range and moments of its finite values, counts of the rest."""
    x = t.detach()
    out: dict[str, Any] = {"dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape), "numel": x.numel()}
    if x.numel() and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool:
        out.update(int_min=int(x.min()), int_max=int(x.max()))  # targets of a loss: all ignored?
    if not x.is_floating_point() or x.numel() == 0:
        return out
    x = x.float()
    finite = torch.isfinite(x)
    vals = x[finite]
    out.update(nan=int(torch.isnan(x).sum()), inf=int(torch.isinf(x).sum()),
               neg_inf=int((x == -math.inf).sum()))
    if vals.numel():
        out.update(min=float(vals.min()), max=float(vals.max()), mean=float(vals.mean()),
                   abs_max=float(vals.abs().max()), zero_fraction=float((vals == 0).float().mean()),
                   negative_fraction=float((vals < 0).float().mean()))
    if x.dim() >= 2 and x.shape[-1] > 1:
        rows = x.reshape(-1, x.shape[-1])
        constant = (rows.amax(-1) == rows.amin(-1)) & torch.isfinite(rows).all(-1)
        out["constant_rows"] = int(constant.sum())
        out["rows"] = rows.shape[0]
        out["all_neg_inf_rows"] = int((rows == -math.inf).all(-1).sum())
    return out
