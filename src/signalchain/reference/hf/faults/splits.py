"""Suspiciously good validation results: three ways HF `datasets` code lets validation material
into training — the split made and then ignored, windows split instead of recordings, and a
sampler over every split."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from signalchain.integrations.hf_musicgen import Batch

from ._registry import fault

if TYPE_CHECKING:
    from signalchain.integrations.hf_musicgen import Example

    from ..pipeline import HFBedPipeline

FAMILY = "splits"
SECTION = "Suspiciously good validation results"


@fault("train_split_is_whole_dataset", FAMILY, "validation examples accidentally included in training", SECTION,
       ["split.shared_id", "split.duplicate"], "split", symptom="too-good-validation")
def _train_split_is_whole_dataset(p: HFBedPipeline) -> None:
    # Bug: `split = ds.train_test_split(test_size=0.2, seed=0)` is computed, validation is read
    # from `split["test"]`, but training goes on with `train_ds = ds` (the variable before the
    # split): every validation clip is also a training clip, under the same id.
    held_out = [e for e in p.examples if e.split == "valid"]
    p.examples = p.examples + [replace(e, split="train") for e in held_out]


@fault("windows_split_randomly", FAMILY, "overlapping windows across splits", SECTION,
       ["split.overlapping_windows"], "split", symptom="too-good-validation")
def _windows_split_randomly(p: HFBedPipeline) -> None:
    seconds, hop = 3.0, 1.5
    rng = np.random.default_rng(0)
    windows: list[Example] = []
    for e in p.examples:
        n, sr = e.audio.shape[-1], e.sample_rate
        size, step = int(seconds * sr), int(hop * sr)
        starts = list(range(0, max(1, n - size + 1), step))
        for j, s in enumerate(starts):
            # Bug: recordings are cut into 3 s windows with a 1.5 s hop (`ds.map(chunk, batched=True)`,
            # each window a new row with its own id) and *then* `train_test_split(shuffle=True)`
            # splits the windows: neighbours that share half their audio land on both sides.
            name = f"{e.source_id}-w{j}"
            split = "valid" if rng.random() < 0.2 else "train"
            windows.append(replace(e, audio=np.ascontiguousarray(e.audio[:, s : s + size]), source_id=name,
                                   metadata={**e.metadata, "source_id": name}, split=split))
    p.examples = windows


@fault("sampler_over_all_splits", FAMILY, "validation examples included in the training sampler", SECTION,
       ["split.sampler_includes_eval"], "split", symptom="too-good-validation")
def _sampler_over_all_splits(p: HFBedPipeline) -> None:
    def loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        # Bug: the training DataLoader is built on `concatenate_datasets([ds["train"], ds["validation"]])`,
        # left over from the final "train on everything" run; `splits()` still reports a clean split.
        pool = list(p.examples) if split == "train" else p.split_examples(split)
        rng = np.random.default_rng(seed)
        size = min(p.batch_size, len(pool))
        while True:
            order = rng.permutation(len(pool))
            for start in range(0, len(order) - size + 1, size):
                yield Batch([pool[int(i)] for i in order[start : start + size]], int(rng.integers(2**31)))

    p.loader = loader  # type: ignore[method-assign]
