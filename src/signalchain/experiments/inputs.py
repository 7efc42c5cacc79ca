"""What the model is fed: the integer ids entering every embedding during one step on the golden
batch. A model whose input at position t is its own target at t learns to copy, and its training
and validation losses look far too good (decoder inputs that were never shifted behind the start
token, HF's `decoder_input_ids=labels`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..pipeline import as_step_output
from ..trace import record, tap
from ._seed import seed_everything
from .context import Context

__all__ = ["measure_model_inputs"]


def measure_model_inputs(ctx: Context, limit: int = 64) -> list[dict[str, Any]]:
    """Each embedding call of one no-grad step of a fresh model: the module's name and its ids."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    names = {m: n for n, m in model.named_modules()}
    seen: list[dict[str, Any]] = []

    def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if len(seen) < limit and args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
            seen.append({"module": names.get(module, "?"), "ids": args[0].detach().cpu().numpy().astype(np.int64)})

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    seed_everything(ctx.seed)
    try:
        with record(values=False), torch.no_grad():
            as_step_output(p.step(model, ctx.batch(), tap))
    finally:
        for h in handles:
            h.remove()
    return seen
