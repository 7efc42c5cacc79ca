"""The HF bed's repetition faults: repeated batches and rows read off the loader and the dataset,
generation settings off `generation_kwargs`, greedy decoding off two generations."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from hf_bed_support import check_registered, setup

torch.set_num_threads(1)

NAMES = {"loader_first_batch_forever", "debug_subset_left_in", "do_sample_store_true", "guidance_scale_in_tenths"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered(("repetition_training", "repetition_generation"), NAMES, "Repetitive generated music")


def _ids(batch) -> list[str]:
    return [e.source_id for e in batch.examples]


def test_loader_first_batch_forever(bed) -> None:
    p = bed.with_faults(["loader_first_batch_forever"])
    batches = list(itertools.islice(p.loader("train"), 4))
    assert all(_ids(b) == _ids(batches[0]) and b.seed == batches[0].seed for b in batches)
    clean = list(itertools.islice(bed.loader("train"), 4))
    assert len({tuple(_ids(b)) for b in clean}) == 4


def test_debug_subset_left_in_is_three_clips_ten_times(bed, golden) -> None:
    p = bed.with_faults(["debug_subset_left_in"])
    rows = Counter(e.source_id for e in p.split_examples("train"))
    assert len(rows) == 3 and set(rows.values()) == {10}
    seen = Counter(i for b in itertools.islice(p.loader("train"), 6) for i in _ids(b))
    assert len(seen) == 3
    model, opt = setup(p)
    p.train_step(model, opt, p.golden_batch(0))


def test_do_sample_store_true_decodes_greedily(bed, golden) -> None:
    p = bed.with_faults(["do_sample_store_true"])
    assert p.generation_kwargs({"temperature": 1.0, "top_k": 250}, 10)["do_sample"] is False
    assert bed.generation_kwargs({"temperature": 1.0}, 10)["do_sample"] is True
    model, _ = setup(p)
    a = p.generate(model, golden, {"max_frames": 8, "seed": 1})["tokens"]
    b = p.generate(model, golden, {"max_frames": 8, "seed": 2})["tokens"]
    assert torch.equal(a, b)  # two seeds, one answer
    clean = [bed.generate(model, golden, {"max_frames": 8, "seed": s})["tokens"] for s in (1, 2)]
    assert not torch.equal(*clean)


def test_guidance_scale_in_tenths(bed) -> None:
    p = bed.with_faults(["guidance_scale_in_tenths"])
    assert p.generation_kwargs(None, 10)["guidance_scale"] == pytest.approx(
        10 * bed.generation_kwargs(None, 10)["guidance_scale"]
    )
