"""A "random" crop whose offset range is computed the wrong way round: every crop starts at 0.

nttcslab/byol-a#9: the dataset pads short clips to the unit length and then draws the crop start
from `unit_length - len(wav)`, which is 0 for padded clips and negative for long ones, so the start
is always 0 and training only ever sees each file's first seconds. The fix (a0f4d84): draw the start
from `len(wav) - unit_length`. Reproduced in a user's reference-style pipeline whose
`choose_crops` computes the room the same way.
"""

from __future__ import annotations

import numpy as np

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline, prep

BUG = RealBug(
    name="data_crop_start_always_zero", thread="https://github.com/nttcslab/byol-a/issues/9",
    library="torch (own dataset)", idiom="own loop; pad to the unit length, then a random crop start",
    cls="data-semantics",
    cause="the crop's room is unit_length - len(wav) (sign reversed), clamped at 0: every crop starts at sample 0",
    fix="draw the start from len(wav) - unit_length",
    stages=("crop",), cause_ids=("crop.not_random",), families=("data",))


class ByolCropPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def choose_crops(self, lengths, segment, rng):
        if self.fixed:
            return prep.choose_crops(lengths, segment, rng)
        padded = np.maximum(lengths, segment)  # short clips were padded to the unit length first
        room = np.maximum(segment - padded, 0)  # the reversed difference: 0 for every clip
        starts = np.array([rng.integers(0, r + 1) for r in room], dtype=np.int64)
        return np.stack([starts, starts + segment], axis=1)


def pipeline(fixed: bool) -> ByolCropPipeline:
    return ByolCropPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    segment = int(round(p.cfg.segment_seconds * p.sample_rate))
    lengths = np.array([int(p.sample_rate * s) for s in (3.0, 4.5, 6.0, 8.0)] * 8)  # clips longer than the crop
    starts = np.concatenate([p.choose_crops(lengths, segment, np.random.default_rng([s, 1]))[:, 0] for s in range(8)])
    zero = float((starts == 0).mean())
    return zero > 0.9, f"{100 * zero:.0f} % of {starts.size} crops of clips longer than the segment start at sample 0"
