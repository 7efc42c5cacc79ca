"""Control: a dataset of clips shorter than the training segment, zero-padded *and* masked.

chavinlo/musicgen_trainer#7: the reporter's dataset is mostly clips shorter than the 30 s segment
and asks whether padding them is all right; the maintainer: yes, padding works. It does when the
padding is masked out of the loss, as here: each clip is zero-padded to the crop and its padding
mask marks exactly its real frames. A good deal of the batch is padding (an innocent sign that
looks like a data bug), and nothing is wrong.
"""

from __future__ import annotations

import math

import numpy as np

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.data import generate_clip
from signalchain.reference.output import _no_tap

BUG = RealBug(
    name="data_short_clips_padded_masked", thread="https://github.com/chavinlo/musicgen_trainer/issues/7",
    library="audiocraft-style own loop", idiom="own loop; clips shorter than the segment, padded and masked",
    cls="control", kind="control",
    cause="innocent: most clips are shorter than the segment; they are zero-padded and the padding is masked",
    fix="none needed", families=("data", "audio"), fast=True)


class ShortClipsPipeline(ReferencePipeline):
    """Every clip lasts 1.1-1.9 s; the crop is 2 s."""

    def clip(self, index: int, seed: int = 0):
        key = (index, seed)
        if key not in self._clip_cache:
            seconds = 1.1 + 0.1 * (index % 9)
            self._clip_cache[key] = generate_clip(index, seed, self.cfg.source_sample_rate, seconds=seconds)
        return self._clip_cache[key]

    def golden_batch(self, seed: int):
        return self.make_batch(range(self.cfg.batch_size), seed=seed, data_seed=seed)

    def splits(self):
        return {s: [self.clip(i) for i in self.split_indices(s)] for s in ("train", "valid")}

    def training_examples(self):
        return [self.clip(i) for i in self.split_indices("train")]


def pipeline(fixed: bool = False) -> ShortClipsPipeline:
    return ShortClipsPipeline()


def shows(fixed: bool = False) -> tuple[bool, str]:
    p = pipeline()
    batch = p.golden_batch(0)
    _, valid, _ = p.prepare_audio(batch, _no_tap)
    segment = int(round(p.cfg.segment_seconds * p.sample_rate))
    frames = p.codec.frames(segment)
    mask = p.padding_mask(valid, frames).numpy()
    real = np.arange(frames)[None, :] < np.array([math.ceil(v / p.codec.hop) for v in valid])[:, None]
    padded = float(1 - valid.sum() / (segment * len(valid)))
    ok = padded > 0.2 and bool((mask == real).all())
    return ok, (f"{100 * padded:.0f} % of the batch is zero padding; the padding mask matches each clip's "
                f"frames: {bool((mask == real).all())}")
