"""Can a symbolic sampler stop? EOS in the configured run, and a run as long as the golden sequences.

A fresh model rarely picks EOS by chance (one token of a few hundred), so a run that never stops says
nothing by itself. What can carry a verdict is the sampler's own view: the logits it picked from give
EOS probability *exactly* 0 at every step (a mask: no model logit lies that far below the best), or
give it enough mass that faithful sampling would have picked it, and it was never picked. The first
could be a minimum length, so the probe runs the configured sampling as long as the golden sequences
(which end in EOS) before anything is said; and reads the model's own EOS probability, teacher-forced
on the golden batch, to show whose doing the zero is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...pipeline import as_step_output
from ...records.generation import GenerationRun
from ...records.symbolic import EosProbe
from ...trace import record, tap
from .._seed import seed_everything
from ..context import Context
from .runs import generate_once

__all__ = ["symbolic_eos_id", "eos_probe", "SURPRISE"]

SURPRISE = math.log(1e-3)  # log P(no EOS at all) under faithful sampling below this: EOS is being refused


def symbolic_eos_id(ctx: Context) -> int | None:
    """The EOS id of a symbolic pipeline's vocabulary (the golden `tokens` tap: `eos_id=`, else `EOS_None`)."""
    rec = ctx.golden().trace.get("tokens")
    if rec is None or rec.meta.get("kind") != "symbolic":
        return None
    eos = rec.meta.get("eos_id")
    if isinstance(eos, (int, np.integer)) and not isinstance(eos, bool):
        return int(eos)
    vocab = rec.meta.get("vocab")
    if isinstance(vocab, (list, tuple)) and "EOS_None" in vocab:
        return list(vocab).index("EOS_None")
    return None


def refuses_eos(run: GenerationRun | None) -> bool:
    """The run never stopped, and its logits either masked EOS at every step or gave it mass it never got."""
    e = run.eos if run is not None and run.error is None else None
    if e is None or e.emitted or not e.steps:
        return False
    return e.zero_steps == e.steps or (e.log_p_none is not None and e.log_p_none < SURPRISE)


def _golden_eos(ctx: Context, eos: int) -> list[int]:
    rec = ctx.golden().trace.get("tokens")
    ids = np.asarray(rec.value) if rec is not None and rec.value is not None else np.zeros((0, 0))
    return [int(np.flatnonzero(r == eos)[0]) for r in ids.reshape(len(ids), -1) if (r == eos).any()]


def _model_eos(ctx: Context, model: torch.nn.Module, eos: int) -> float | None:
    """Mean p(EOS) the model gives, teacher-forced on the golden batch, where the target is EOS."""
    seed_everything(ctx.seed)
    with record(values={"logits", "targets"}, stages={"logits", "targets"}) as t, torch.no_grad():
        out = as_step_output(ctx.pipeline.step(model, ctx.batch(), tap))
    logits = t.value("logits") if "logits" in t else (
        out.logits.detach().float().cpu().numpy() if out.logits is not None else None)
    targets = t.value("targets") if "targets" in t else (
        out.targets.detach().cpu().numpy() if out.targets is not None else None)
    if logits is None or targets is None or np.shape(logits)[:-1] != np.shape(targets) or eos >= np.shape(logits)[-1]:
        return None
    at = np.asarray(targets) == eos
    if not at.any():
        return None
    z = np.asarray(logits, dtype=np.float64)[at]
    z = z - z.max(axis=1, keepdims=True)
    return float((np.exp(z[:, eos]) / np.exp(z).sum(axis=1)).mean())


def eos_probe(ctx: Context, model: torch.nn.Module, prompts: Any, configured: GenerationRun | None,
              eos: int | None, frame_rate: float | None = None) -> EosProbe | None:
    """Run only when the configured run refused EOS: the configured sampling again, as long as the golden
    sequences, and the model's teacher-forced EOS probability."""
    if eos is None or not refuses_eos(configured):
        return None
    golden = _golden_eos(ctx, eos)
    # As long as the longest golden sequence, within `gen_symbolic_tokens`; but at least as long as half of
    # them (the judge needs most sequences to have ended), within four times that budget.
    cap = max(ctx.budget.gen_symbolic_tokens, 1)
    half = int(np.median(golden)) + 1 if golden else 0
    limit = int(min(max([configured.eos.length, *golden]) + 1, max(cap, half), 4 * cap))
    run, _, _ = generate_once(ctx.pipeline, model, prompts, "stop: as long as the golden sequences", {}, ctx.seed,
                              limit, frame_rate, eos_id=eos)
    try:
        model_p = _model_eos(ctx, model, eos)
    except Exception:  # the step itself fails: the other families say why
        model_p = None
    return EosProbe(stats=run.eos, limit=limit, frames_generated=run.frames_generated, golden_eos_positions=golden,
                    model_eos_probability=model_p, error=run.error)
