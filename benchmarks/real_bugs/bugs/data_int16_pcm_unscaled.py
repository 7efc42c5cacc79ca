"""int16 PCM read with scipy and cast to float without scaling to [-1, 1].

JusperLee/Dual-Path-RNN-Pytorch#16: the reporter read the WAV files with `scipy.io.wavfile.read`,
which returns int16 samples (±32768), fed them to the model as floats, and the loss went to NaN
after a while; the maintainer: the model expects floats in [-1, 1], divide the int16 samples by
2**15 (or load with a reader that returns floats). Reproduced in a user's reference-style pipeline
whose loader decodes each clip from 16-bit WAV bytes with scipy.
"""

from __future__ import annotations

import io

import numpy as np
import scipy.io.wavfile
import soundfile as sf

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="data_int16_pcm_unscaled", thread="https://github.com/JusperLee/Dual-Path-RNN-Pytorch/issues/16",
    library="scipy.io.wavfile + torch", idiom="own pipeline, clips decoded from 16-bit WAV files with scipy",
    cls="data-semantics",
    cause="scipy returns int16 PCM; casting it to float32 without dividing by 2**15 feeds samples of ±32768",
    fix="divide int16 samples by 32768 (or read floats with soundfile/librosa)",
    stages=("audio.original",), cause_ids=("audio.scale",), symptom="nan", fast=True)


def decode(clip: np.ndarray, rate: int, fixed: bool) -> np.ndarray:
    """The user's decode of one 16-bit file: scipy, then float."""
    buf = io.BytesIO()
    sf.write(buf, np.ascontiguousarray(clip.T), rate, format="WAV", subtype="PCM_16")
    buf.seek(0)
    _, data = scipy.io.wavfile.read(buf)  # int16 [samples, channels] or [samples]
    data = data.astype(np.float32)
    if fixed:
        data = data / 32768.0
    data = data.T if data.ndim == 2 else data[None, :]
    return np.ascontiguousarray(data)


class WavPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def load_clips(self, batch):
        return [decode(c, batch.sample_rate, self.fixed) for c in batch.clips]


def pipeline(fixed: bool) -> WavPipeline:
    return WavPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    peaks = [float(np.abs(c).max()) for c in p.load_clips(batch)]
    return max(peaks) > 1.5, f"decoded clips peak at {max(peaks):.4g} (full scale is 1.0)"
