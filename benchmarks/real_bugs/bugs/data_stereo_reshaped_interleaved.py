"""A stereo WAV read with scipy and reshaped to one channel: left and right samples interleaved.

teddykoker/pedalnet#3: the trained model's output was "exactly twice as long" and stretched in time;
the maintainer found the input file was stereo: `scipy.io.wavfile.read` returns `[samples, 2]`, and
`prepare_data.py` reshapes it with `in_data.reshape((-1, 1, sample_size))`, which lays the two channels
out one after the other sample by sample (L0 R0 L1 R1 ...) as a single channel of twice the length,
heard at the file's rate: half speed, an octave down. The fix the thread gave: keep one channel
(`data[:, 0]`) before reshaping. Reproduced in a user's reference-style pipeline whose loader decodes
each clip from a 16-bit WAV file with scipy and reshapes it to `[1, samples]`.
"""

from __future__ import annotations

import io

import numpy as np
import scipy.io.wavfile
import soundfile as sf

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="data_stereo_reshaped_interleaved", thread="https://github.com/teddykoker/pedalnet/issues/3",
    library="scipy.io.wavfile + numpy", idiom="own pipeline, clips decoded from 16-bit WAV files, reshape(1, -1)",
    cls="data-semantics",
    cause="scipy returns stereo as [samples, 2]; reshape(1, -1) interleaves L and R into one channel of twice "
          "the length, so every stereo clip plays at half speed an octave down (and twice as long)",
    fix="keep one channel (data[:, 0]) before reshaping (or transpose to [channels, samples])",
    stages=("audio.original",), cause_ids=("audio.interleaved", "audio.duration_mismatch", "audio.layout"),
    families=("audio", "data"))  # "the output is stretched, twice as long": no symptom name fits


def decode(clip: np.ndarray, rate: int, fixed: bool) -> np.ndarray:
    """The user's decode of one 16-bit file: scipy, scale to [-1, 1], reshape to one channel."""
    buf = io.BytesIO()
    sf.write(buf, np.ascontiguousarray(clip.T), rate, format="WAV", subtype="PCM_16")
    buf.seek(0)
    _, data = scipy.io.wavfile.read(buf)  # int16 [samples, channels] (stereo) or [samples] (mono)
    data = data.astype(np.float32) / 32768.0
    if fixed and data.ndim == 2:
        data = data[:, 0]  # the thread's fix: one channel
    return np.ascontiguousarray(data.reshape(1, -1))  # the bug: [samples, 2] -> [1, 2 * samples], interleaved


class WavPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def load_clips(self, batch):
        return [decode(c, batch.sample_rate, self.fixed) for c in batch.clips]


def pipeline(fixed: bool) -> WavPipeline:
    return WavPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The decoded length of each stereo clip against the frames its file holds."""
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    stereo = [c for c in batch.clips if c.shape[0] == 2]
    got = [decode(c, batch.sample_rate, fixed).shape[-1] for c in stereo]
    want = [c.shape[-1] for c in stereo]
    ratios = [g / w for g, w in zip(got, want)]
    long = [r for r in ratios if r > 1.5]
    return bool(long), (f"{len(stereo)} stereo clips decode to {got[:3]} samples at {batch.sample_rate} Hz "
                        f"(files hold {want[:3]} frames; ratio {[round(r, 2) for r in ratios[:3]]})")
