"""Pieces the HF bed's faults share: the integration's train step with one part replaceable, the
decoder inputs HF makes from labels, a scheduler table. Not a fault module (no registrations)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..pipeline import HFBedPipeline

__all__ = ["no_tap", "hf_decoder_inputs", "trainable", "attach_scheduler", "scheduler_for", "replace_examples",
           "short_examples"]


def no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


def hf_decoder_inputs(model: Any, labels: torch.Tensor) -> torch.Tensor:
    """What HF feeds the decoder when only `labels` [B, T', K] are given: `[B*K, T']`, shifted
    right behind the start token, -100 turned into the pad id (`shift_tokens_right`)."""
    from transformers.models.musicgen.modeling_musicgen import shift_tokens_right

    cfg = model.config.decoder
    shifted = shift_tokens_right(labels, cfg.pad_token_id, cfg.decoder_start_token_id)  # [B, K, T']
    return shifted.reshape(-1, shifted.shape[-1])


def trainable(model: Any) -> list[torch.nn.Parameter]:
    return [q for q in model.parameters() if q.requires_grad]


_SCHEDULERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def attach_scheduler(p: HFBedPipeline, make: Callable[[torch.optim.Optimizer], Any]) -> None:
    """Give every optimiser `p` builds a scheduler `make(opt)`, stepped after each `train_step`
    (as HF's Trainer steps `lr_scheduler` right after `optimizer.step()`)."""
    build_optimizer, train_step = p.build_optimizer, p.train_step

    def build(model: Any) -> torch.optim.Optimizer:
        opt = build_optimizer(model)
        _SCHEDULERS[opt] = make(opt)
        return opt

    def step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        out = train_step(model, optimizer, batch, tap)
        scheduler = _SCHEDULERS.get(optimizer)
        if scheduler is not None:
            scheduler.step()
            tap("lr", float(optimizer.param_groups[0]["lr"]))
        return out

    p.build_optimizer = build  # type: ignore[method-assign]
    p.train_step = step  # type: ignore[method-assign]


def scheduler_for(optimizer: Any) -> Any:
    return _SCHEDULERS.get(optimizer)


def short_examples(p: HFBedPipeline) -> list[int]:
    """Indices (into `p.examples`) of the clips shorter than the training crop: the golden batch
    of every seed holds one (see `HFBedPipeline.golden_batch`)."""
    seg = p.segment_seconds
    return [i for i, e in enumerate(p.examples) if e.audio.shape[-1] / e.sample_rate < seg]


def replace_examples(p: HFBedPipeline, indices: list[int], audio: Callable[[np.ndarray], np.ndarray]) -> None:
    """Give the examples at `indices` new audio `audio(old)` (new arrays: the bed's clips are shared)."""
    for i in indices:
        e = p.examples[i]
        p.examples[i] = replace(e, audio=np.ascontiguousarray(audio(e.audio.copy()), dtype=np.float32))
