"""Silent or nearly silent output, and audio that is not what the codec was told it is: a crop
drawn over the padded batch, a dataset never resampled, float audio divided as if it were PCM,
codebooks reversed on the way in or out of the codec, stereo codes laid out side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._registry import fault

if TYPE_CHECKING:
    from signalchain.integrations.hf_musicgen import Example

    from ..pipeline import HFBedPipeline

SECTION = "Silent or nearly silent output"


# ---- 1. the source audio is incorrectly normalised ---------------------------------------------------

@fault("float_audio_divided_as_pcm", "silence", "the source audio is incorrectly normalised", SECTION,
       ["audio.silent", "audio.scale"], "audio.resampled", symptom="silent")
def _float_audio_divided_as_pcm(p: HFBedPipeline) -> None:
    resample = p.resample

    def to_codec_rate(examples: list[Example]) -> list[np.ndarray]:
        # Bug: the preprocessing was written for `soundfile.read(dtype="int16")` and divides by
        # 32768; the HF `Audio` feature already returns float32 in [-1, 1]: every clip lands about
        # 90 dB down, and the codec encodes near-silence.
        return [x / 32768.0 for x in resample(examples)]

    p.resample = to_codec_rate  # type: ignore[method-assign]


@fault("dataset_rate_not_resampled", "silence", "the audio reaches the codec at the wrong sample rate", SECTION,
       ["audio.sample_rate"], "audio.resampled", symptom="silent")
def _dataset_rate_not_resampled(p: HFBedPipeline) -> None:
    def to_codec_rate(examples: list[Example]) -> list[np.ndarray]:
        # Bug: the resampling step reads the source rate from `model.config.audio_encoder.sampling_rate`
        # instead of each row's `audio["sampling_rate"]` ("the data is prepared for this model"): it
        # resamples 16 kHz to 16 kHz, a no-op. The 32 kHz clips reach the codec as 16 kHz audio,
        # twice as long and an octave down; a 2 s crop holds one second of music.
        return [np.ascontiguousarray(e.audio, dtype=np.float32) for e in examples]

    p.resample = to_codec_rate  # type: ignore[method-assign]


# ---- 3. the crop selects a padded region ---------------------------------------------------------

@fault("crop_from_padded_batch", "silence", "the crop selects an empty or padded region", SECTION,
       ["crop.in_padding"], "crop", symptom="silent")
def _crop_from_padded_batch(p: HFBedPipeline) -> None:
    def choose_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug: the random crop is drawn on the collated batch tensor (`audio.shape[-1]`, the longest
        # clip) instead of each clip's own length: shorter clips are cropped mostly from their zero
        # padding, and the model is trained to continue silence.
        total = int(lengths.max())
        starts = rng.integers(0, max(1, total - segment + 1), size=len(lengths))
        return np.stack([starts, starts + segment], axis=1).astype(np.int64)

    p.choose_crops = choose_crops  # type: ignore[method-assign]


