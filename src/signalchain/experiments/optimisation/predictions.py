"""Stale predictions: logits for two different batches from the same model must differ."""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from ...pipeline import as_step_output
from ...trace import record, tap
from .._seed import seed_everything
from ..context import Context

__all__ = ["measure_predictions"]


def measure_predictions(ctx: Context, model: torch.nn.Module) -> dict[str, Any]:
    """Logits for the golden batch and for another batch, from the same model: they must differ."""
    p = ctx.pipeline
    other = next(iter(p.loader("train")))
    hashes = []
    for batch in (ctx.batch(), other):
        seed_everything(ctx.seed)
        with record(stages={"tokens", "logits"}) as t, torch.no_grad():
            out = as_step_output(p.step(model, batch, tap))
        logits = (
            t["logits"].summary["hash"]
            if "logits" in t
            else (
                hashlib.sha256(out.logits.detach().cpu().numpy().tobytes()).hexdigest()
                if isinstance(out.logits, torch.Tensor)
                else None
            )
        )
        hashes.append({"tokens": t["tokens"].summary["hash"] if "tokens" in t else None, "logits": logits})
    return {"golden": hashes[0], "other": hashes[1]}
