"""A downmix written for channels-first audio applied to what soundfile returns (channels last).

huggingface/transformers#47886: `soundfile.read` returns `[samples, channels]`; code that downmixes
with `mean(axis=0)` (right for `[channels, samples]`) averages across time instead, and a stereo file
becomes a "mono" clip of two samples. The thread's fix: average over the channel axis (`axis=1`, or
transpose first). Reproduced in a user's reference-style pipeline whose loader decodes each clip
from WAV bytes with soundfile, as a dataset of files does.
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="data_channels_last_downmix", thread="https://github.com/huggingface/transformers/issues/47886",
    library="soundfile", idiom="own pipeline, clips decoded from WAV files", cls="data-semantics",
    cause="mean(axis=0) on soundfile's [samples, channels] averages over time: a stereo file becomes 2 samples",
    fix="average over the channel axis (mean(axis=1))",
    stages=("audio.original",), cause_ids=("audio.duration_mismatch", "audio.layout"), symptom="silent",
    fast=True)


def decode(clip: np.ndarray, rate: int, fixed: bool) -> np.ndarray:
    """The user's decode of one file: soundfile, then a downmix to `[1, samples]`."""
    buf = io.BytesIO()
    sf.write(buf, np.ascontiguousarray(clip.T), rate, format="WAV", subtype="FLOAT")
    buf.seek(0)
    data, _ = sf.read(buf, dtype="float32")  # [samples, channels], or [samples] for a mono file
    if data.ndim == 2:
        data = data.mean(axis=1 if fixed else 0)
    return data[None, :].astype(np.float32)


class FilePipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def load_clips(self, batch):
        return [decode(c, batch.sample_rate, self.fixed) for c in batch.clips]


def pipeline(fixed: bool) -> FilePipeline:
    return FilePipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    stereo = [c for c in batch.clips if c.shape[0] == 2]
    got = [decode(c, batch.sample_rate, fixed).shape[-1] for c in stereo]
    want = [c.shape[-1] for c in stereo]
    short = [g for g, w in zip(got, want) if g < 0.5 * w]
    return bool(short), f"{len(stereo)} stereo clips decode to {got[:3]} samples (files hold {want[:3]})"
