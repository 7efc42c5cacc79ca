"""Training audio handed to the model at its stored rate: the resample step exists only in preprocessing.

neillu23/CDiffuSE#4: the recipe resamples VoiceBank-DEMAND's 48 kHz files to 16 kHz in its
preprocessing and inference scripts, but the training dataset loads the files and passes them on as
they are, so the 16 kHz model trains on 48 kHz samples (everything an octave and more too low, three
times too long). The fix: resample to the model's rate in the training dataset too. Reproduced in a
user's reference-style pipeline (clips stored at 32 kHz, codec at 16 kHz) whose training path skips
the resample because "the data was already prepared".
"""

from __future__ import annotations

import numpy as np

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline, prep

BUG = RealBug(
    name="data_rate_not_resampled", thread="https://github.com/neillu23/CDiffuSE/issues/4",
    library="torch (own dataset)",
    idiom="own loop; resampling in preprocessing/inference only, not in the training dataset",
    cls="data-semantics",
    cause="the training path never resamples: 32 kHz clips reach the 16 kHz codec as if they were at 16 kHz",
    fix="resample each clip from its stored rate to the model's rate in the training dataset",
    stages=("audio.resampled",), cause_ids=("audio.sample_rate",), symptom="silent", fast=True)


class TrainSetPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def resample(self, audio, lengths, sr_in, sr_out):
        if self.fixed:
            return prep.resample(audio, lengths, sr_in, sr_out)
        return audio.copy(), lengths.copy()  # "already resampled by preprocess.py": it was not, for training


def pipeline(fixed: bool) -> TrainSetPipeline:
    return TrainSetPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    audio, lengths = prep.collate(batch.clips)
    out, new_lengths = p.resample(audio, lengths, batch.sample_rate, p.sample_rate)
    stored = lengths / batch.sample_rate  # seconds in the files
    seen = new_lengths / p.sample_rate  # seconds the model hears at its own rate
    ratio = float(np.median(seen / stored))
    return abs(ratio - 1) > 0.05, f"clips last {ratio:.2f}× their true duration at the model's {p.sample_rate} Hz"
