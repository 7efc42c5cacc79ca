"""Silent or nearly silent output: where the sound is lost between the file and the speaker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import ReferencePipeline


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
