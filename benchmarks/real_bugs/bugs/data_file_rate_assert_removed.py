"""Files at 24 kHz read as if they were at the 32 kHz the config declares: the rate check removed.

kan-bayashi/ParallelWaveGAN#106: preprocessing asserts that each file's rate equals the config's
`sampling_rate`; the reporter's files were at 16 kHz, not the 22.05 kHz of the config, the assert
failed, they commented it out, and "everything works but the output audio is sped up". The
maintainer: the wav files are not at the config's rate. The fix: resample the files to the configured
rate (or use a config for their rate) instead of dropping the check. Reproduced in a user's
reference-style pipeline whose dataset was exported at 24 kHz: the loader reads each file with
soundfile, ignores the rate it returns, and the batch keeps declaring the configured 32 kHz.
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
import soxr

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

FILE_RATE = 24000  # what the files really are


BUG = RealBug(
    name="data_file_rate_assert_removed", thread="https://github.com/kan-bayashi/ParallelWaveGAN/issues/106",
    library="soundfile (own preprocessing)", idiom="own pipeline; file-rate assert commented out, config rate assumed",
    cls="data-semantics",
    cause="files at 24 kHz are declared at the configured 32 kHz: everything after is sped up 1.33× "
          "(pitch up ~5 semitones)",
    fix="resample each file from the rate soundfile returns to the configured rate (keep the assert)",
    stages=("audio.original",), cause_ids=("audio.sample_rate", "audio.duration_mismatch"), symptom="silent")


def exported(clip: np.ndarray, rate: int) -> bytes:
    """The dataset on disk: each clip exported at 24 kHz."""
    buf = io.BytesIO()
    sf.write(buf, soxr.resample(np.ascontiguousarray(clip.T), rate, FILE_RATE), FILE_RATE, format="WAV",
             subtype="FLOAT")
    return buf.getvalue()


def read(data: bytes, config_rate: int, fixed: bool) -> np.ndarray:
    audio, file_rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)  # [samples, channels]
    # assert file_rate == config_rate  -- commented out by the user
    if fixed and file_rate != config_rate:
        audio = soxr.resample(audio, file_rate, config_rate)
    return np.ascontiguousarray(audio.T.astype(np.float32))


class ExportedPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def load_clips(self, batch):
        # batch.sample_rate is the configured rate (32 kHz), as the user's config says
        return [read(exported(c, batch.sample_rate), batch.sample_rate, self.fixed) for c in batch.clips]


def pipeline(fixed: bool) -> ExportedPipeline:
    return ExportedPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    loaded = p.load_clips(batch)
    true_seconds = np.array([c.shape[-1] / batch.sample_rate for c in batch.clips])
    heard = np.array([c.shape[-1] / batch.sample_rate for c in loaded])  # at the declared rate
    ratio = float(np.median(true_seconds / heard))
    return abs(ratio - 1) > 0.05, f"audio plays {ratio:.2f}× as fast as recorded at the declared {batch.sample_rate} Hz"
