"""The fault catalogue: every failure cause the method lists, injected the way the real bug arises.

A fault is a function that changes a `ReferencePipeline` instance: it swaps one of the pipeline's
stage methods for a buggy version (a wrong slice, a `.detach()`, an inverted comparison…) or
changes a setting the way a bad config would. Each declares the finding id(s) that must fire and
the stage that must be blamed. Detectors never see any of this (DESIGN §6): they see only what the
pipeline's taps, outputs and gradients show.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from .pipeline import ReferencePipeline

__all__ = ["Fault", "CATALOGUE", "FAMILIES", "fault", "apply_faults", "get_fault"]

FAMILIES = ("flat_loss", "learning_rate", "nonfinite", "precision", "repetition_training",
            "repetition_generation", "conditioning", "silence", "splits", "performance", "step_boundaries")


@dataclass(frozen=True)
class Fault:
    name: str
    family: str
    cause: str  # in the method's words: which numbered cause this is
    section: str  # the seed section it comes from
    expected_ids: tuple[str, ...]
    expected_stage: str
    apply: Callable[[ReferencePipeline], None]
    symptom: str | None = None  # the `doctor --symptom` a user would report

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "cause": self.cause, "section": self.section,
                "expected_ids": list(self.expected_ids), "expected_stage": self.expected_stage,
                "symptom": self.symptom}


CATALOGUE: dict[str, Fault] = {}


def fault(name: str, family: str, cause: str, section: str, ids: Sequence[str], stage: str,
          symptom: str | None = None) -> Callable[[Callable[[ReferencePipeline], None]], Callable[[ReferencePipeline], None]]:
    """Register the decorated function as the injector of fault `name`."""
    if family not in FAMILIES:
        raise ValueError(f"fault {name!r}: unknown family {family!r}; allowed: {', '.join(FAMILIES)}")

    def deco(fn: Callable[[ReferencePipeline], None]) -> Callable[[ReferencePipeline], None]:
        if name in CATALOGUE:
            raise ValueError(f"fault {name!r} is registered twice")
        CATALOGUE[name] = Fault(name, family, cause, section, tuple(ids), stage, fn, symptom)
        return fn

    return deco


def get_fault(name: str) -> Fault:
    if name not in CATALOGUE:
        close = difflib.get_close_matches(name, CATALOGUE, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `signalchain faults --list` lists them"
        raise ValueError(f"unknown fault {name!r}{hint}")
    return CATALOGUE[name]


def apply_faults(pipeline: ReferencePipeline, names: Sequence[str]) -> None:
    for name in names:
        get_fault(name).apply(pipeline)


# ---- silence: where a crop, a downmix or a scale loses the sound ---------------------------------

@fault("crop_in_padding", "silence", "the crop selects an empty or padded region", "Silent or nearly silent output",
       ["crop.in_padding"], "crop", symptom="silent")
def _crop_in_padding(p: ReferencePipeline) -> None:
    def choose_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug: the window is placed relative to the padded batch length, not the clip's own length,
        # so short clips are cropped from the zero padding at their end.
        total = int(lengths.max())
        starts = np.full(len(lengths), max(total - segment, 0), dtype=np.int64)
        return np.stack([starts, starts + segment], axis=1)

    p.choose_crops = choose_crops  # type: ignore[method-assign]


@fault("stereo_phase_cancel", "silence", "channel conversion cancels the waveform", "Silent or nearly silent output",
       ["audio.channel_cancel"], "audio.mono", symptom="silent")
def _stereo_phase_cancel(p: ReferencePipeline) -> None:
    def to_mono(audio: np.ndarray) -> np.ndarray:
        # Bug: the right channel is read with inverted polarity (a sign error in an M/S decode),
        # so the downmix subtracts the channels and correlated content cancels.
        return (audio[:, :1] - audio[:, 1:2]) / 2.0

    p.to_mono = to_mono  # type: ignore[method-assign]


# ---- step boundaries: what AudioCraft's solver checks ---------------------------------------------

@fault("codebooks_swapped", "silence", "the decoder receives the wrong shape or codebook order",
       "Silent or nearly silent output", ["tokens.codebook_order"], "tokens", symptom="silent")
def _codebooks_swapped(p: ReferencePipeline) -> None:
    encode = p.encode_tokens

    def encode_tokens(cropped: np.ndarray) -> torch.Tensor:
        # Bug: codes are transposed from the codec's [B, F, K] layout with the wrong permutation
        # order, which here reverses the codebook axis: the finest codebook is trained as the coarsest.
        return encode(cropped).flip(1)

    p.encode_tokens = encode_tokens  # type: ignore[method-assign]


# ---- flat loss: the loss cannot fall ----------------------------------------------------------------

@fault("mask_all_padding", "flat_loss", "the valid loss mask is empty", "Loss does not decrease",
       ["mask.empty"], "mask.padding", symptom="flat-loss")
def _mask_all_padding(p: ReferencePipeline) -> None:
    def padding_mask(valid: np.ndarray, frames: int) -> torch.Tensor:
        # Bug: the comparison is inverted (frame >= length), so every real frame counts as padding.
        n_valid = np.ceil(valid / p.codec.hop).astype(np.int64)
        mask = np.arange(frames)[None, :] >= np.maximum(n_valid[:, None], frames)
        return torch.from_numpy(mask)

    p.padding_mask = padding_mask  # type: ignore[method-assign]


@fault("loss_from_targets", "flat_loss", "the model output does not influence the selected loss",
       "Loss does not decrease", ["loss.independent_of_output"], "loss", symptom="flat-loss")
def _loss_from_targets(p: ReferencePipeline) -> None:
    def compute_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: a refactor computes the loss from a one-hot of the targets instead of the logits
        # (two variables swapped). backward() then complained that the loss needs no gradient, and
        # someone "fixed" that with requires_grad_(): the loss is now a constant cut off from the model.
        onehot = torch.nn.functional.one_hot(targets, logits.shape[-1]).float() * 10.0
        ce = torch.nn.functional.cross_entropy(onehot.flatten(0, 2), targets.flatten(), reduction="none")
        ce = ce.view_as(targets) * mask
        per = ce.sum(dim=(0, 2)) / mask.sum(dim=(0, 2)).clamp(min=1)
        loss = ce.sum() / mask.sum().clamp(min=1)
        return loss.requires_grad_(True), per

    p.compute_loss = compute_loss  # type: ignore[method-assign]
