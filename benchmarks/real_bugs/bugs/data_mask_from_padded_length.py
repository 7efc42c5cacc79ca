"""A padding mask computed from the length of the audio *after* padding: every frame counts as real.

janhq/WhisperSpeech#19: the loader pads each clip to the fixed window first and then builds the
frame mask from the length of the padded array, so the mask is all ones and the zero padding is
treated as real audio (the padding embedding is never used, the model learns padding as content).
The fix: build the mask from each clip's length before padding. Reproduced in a user's
reference-style pipeline: the golden batch's last clip is shorter than the crop, and the user's
`padding_mask` reads the padded crop's length instead of each clip's valid samples.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline, prep
from signalchain.reference.output import _no_tap

BUG = RealBug(
    name="data_mask_from_padded_length", thread="https://github.com/janhq/WhisperSpeech/pull/19",
    library="torch (own loader)", idiom="own loop; pad to the window, then mask from the padded length",
    cls="data-semantics",
    cause="the frame mask is built from the padded audio's length, so it is all ones and the loss trains on "
          "zero padding",
    fix="build the mask from each clip's true (unpadded) length",
    stages=("mask.padding", "mask.loss"), cause_ids=("mask.padding_trained",), families=("data",))


class PaddedMaskPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def padding_mask(self, valid: np.ndarray, frames: int) -> torch.Tensor:
        if self.fixed:
            return super().padding_mask(valid, frames)
        padded = np.full_like(valid, frames * self.codec.hop)  # len(padded_audio): the window, for every row
        return torch.from_numpy(prep.padding_mask(padded, self.codec.hop, frames))


def pipeline(fixed: bool) -> PaddedMaskPipeline:
    return PaddedMaskPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    _, valid, _ = p.prepare_audio(batch, _no_tap)
    frames = p.codec.frames(int(round(p.cfg.segment_seconds * p.sample_rate)))
    mask = p.padding_mask(valid, frames).numpy()
    real = np.arange(frames)[None, :] < np.array([math.ceil(v / p.codec.hop) for v in valid])[:, None]
    on_padding = int((mask & ~real).sum())
    return on_padding > 0, f"{on_padding} masked-in frames lie in zero padding ({int((~real).sum())} padded frames)"
