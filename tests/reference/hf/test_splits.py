"""The HF bed's split faults: what crosses from validation into training, read off `splits()`,
the examples' audio and the training loader."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from hf_bed_support import check_registered, setup

torch.set_num_threads(1)

NAMES = {"train_split_is_whole_dataset", "windows_split_randomly", "sampler_over_all_splits"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("splits", NAMES, "Suspiciously good validation results")


def test_clean_splits_share_nothing(bed) -> None:
    s = bed.splits()
    assert not {e.source_id for e in s["train"]} & {e.source_id for e in s["valid"]}
    seen = {e.source_id for b in itertools.islice(bed.loader("train"), 20) for e in b.examples}
    assert not seen & {e.source_id for e in s["valid"]}


def test_train_split_is_whole_dataset_trains_on_every_validation_clip(bed, golden) -> None:
    p = bed.with_faults(["train_split_is_whole_dataset"])
    s = p.splits()
    train = {e.source_id: e for e in s["train"]}
    assert s["valid"] and all(e.source_id in train and np.array_equal(train[e.source_id].audio, e.audio)
                              for e in s["valid"])
    model, opt = setup(p)
    p.train_step(model, opt, golden)


def test_windows_split_randomly_puts_overlapping_windows_on_both_sides(bed) -> None:
    p = bed.with_faults(["windows_split_randomly"])
    s = p.splits()
    assert len(s["train"]) > len(bed.splits()["train"]) and s["valid"]
    assert not {e.source_id for e in s["train"]} & {e.source_id for e in s["valid"]}  # the ids look clean
    half = int(1.5 * bed.examples[0].sample_rate)
    tails = {e.audio[:, half:].tobytes() for e in s["train"]}
    heads = {e.audio[:, :half].tobytes() for e in s["train"]}
    # a validation window whose first half is a training window's second half (or the reverse)
    shared = [e for e in s["valid"] if e.audio[:, :half].tobytes() in tails or e.audio[:, half:].tobytes() in heads]
    assert len(shared) >= 3


def test_sampler_over_all_splits_draws_validation_clips(bed) -> None:
    p = bed.with_faults(["sampler_over_all_splits"])
    valid = {e.source_id for e in p.splits()["valid"]}
    assert {e.source_id for e in p.splits()["train"]}.isdisjoint(valid)  # splits() still looks clean
    seen = {e.source_id for b in itertools.islice(p.loader("train"), 20) for e in b.examples}
    assert len(seen & valid) >= len(valid) // 2
