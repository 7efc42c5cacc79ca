"""Repetitive generated music, from training data (a loader that repeats its first batch, a debug
subset left in) and from generation settings (a `store_true` flag that turns sampling off, a
guidance scale read in the wrong units)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from signalchain.integrations.hf_musicgen import Batch

from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import HFBedPipeline

SECTION = "Repetitive generated music"
TRAINING, GENERATION = "repetition_training", "repetition_generation"


# ---- training ---------------------------------------------------------------------------------------

@fault("loader_first_batch_forever", TRAINING, "the data loader returns the same batch every step", SECTION,
       ["loader.repeats"], "loader", symptom="repetitive")
def _loader_first_batch_forever(p: HFBedPipeline) -> None:
    def loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        pool = p.split_examples(split)
        size = min(p.batch_size, len(pool))
        while True:
            # Bug: the loop calls `batch = next(iter(DataLoader(ds, shuffle=True, generator=g)))` with
            # `g = torch.Generator().manual_seed(seed)` made inside the loop: a fresh iterator with the
            # same seed every step, so always the same first batch with the same crops. The model
            # memorises four clips.
            rng = np.random.default_rng(seed)
            order = rng.permutation(len(pool))
            yield Batch([pool[int(i)] for i in order[:size]], int(rng.integers(2**31)))

    p.loader = loader  # type: ignore[method-assign]


@fault("debug_subset_left_in", TRAINING, "duplicated data: the training set is copies of a few clips", SECTION,
       ["loader.repeats"], "loader", symptom="repetitive")
def _debug_subset_left_in(p: HFBedPipeline) -> None:
    # Bug: `ds = ds.select(range(3))` from a smoke test stays in, and `concatenate_datasets([ds] * 10)`
    # (added to get "enough steps per epoch") hides how small the set became: 30 rows, 3 clips.
    train = [e for e in p.examples if e.split == "train"][:3]
    p.examples = [e for e in p.examples if e.split != "train"] + [replace(e) for _ in range(10) for e in train]


# ---- generation ---------------------------------------------------------------------------------------

@fault("do_sample_store_true", GENERATION, "greedy decoding: always the most likely token", SECTION,
       ["generation.greedy"], "generation", symptom="repetitive")
def _do_sample_store_true(p: HFBedPipeline) -> None:
    generation_kwargs = p.generation_kwargs

    def kwargs(sampling: dict[str, Any] | None, frames: int) -> dict[str, Any]:
        kw = generation_kwargs(sampling, frames)
        # Bug: the generation script declares `parser.add_argument("--do_sample", action="store_true")`
        # and the launch command never passes it: `do_sample=False`, greedy search, whatever
        # temperature or top-k the run sheet sets (HF only warns that they are ignored).
        kw["do_sample"] = False
        return kw

    p.generation_kwargs = kwargs  # type: ignore[method-assign]


@fault("guidance_scale_in_tenths", GENERATION, "excessive guidance", SECTION,
       ["generation.excessive_guidance"], "generation", symptom="repetitive")
def _guidance_scale_in_tenths(p: HFBedPipeline) -> None:
    # Bug: the demo's slider stores guidance in tenths (`guidance: 30` for 3.0) and the batch
    # script passes the stored value straight to `generate(guidance_scale=...)`: 30, ten times
    # MusicGen's default, collapses sampling onto a few over-emphasised codes.
    p.guidance_scale = 30.0
