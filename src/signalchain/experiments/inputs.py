"""What the model is fed: the integer ids entering every embedding during one step on the golden
batch. A model whose input at position t is its own target at t learns to copy, and its training
and validation losses look far too good (decoder inputs that were never shifted behind the start
token, HF's `decoder_input_ids=labels`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..pipeline import as_step_output
from ..probes.embedding_inputs import EmbeddingInputs
from ..trace import record, tap
from ._seed import seed_everything
from .context import Context

__all__ = ["measure_model_inputs"]


def measure_model_inputs(ctx: Context, limit: int = 64) -> list[dict[str, Any]]:
    """Each embedding call of one no-grad step of a fresh model: the module's name and its ids."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    seed_everything(ctx.seed)
    with EmbeddingInputs(model).attached_to() as probe, record(values=False), torch.no_grad():
        as_step_output(p.step(model, ctx.batch(), tap))
    return [{"module": c.name, "ids": c.ids.cpu().numpy().astype(np.int64)}
            for c in probe.calls if not c.ids.is_floating_point()][:limit]
