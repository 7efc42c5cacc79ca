"""The flat-loss faults of the data side: targets, a nearly empty mask, loaders, a stale cache.

Symptoms are measured on the taps (targets against tokens, mask coverage), on loader output and
by re-encoding the cropped audio independently, never through a detector.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np
import pytest
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import get_fault
from signalchain.trace.vocabulary import stage_info

torch.set_num_threads(1)

SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=64, layers=1, warmup_steps=1)
NAMES = {"targets_random", "targets_codebook_index", "targets_shifted_one_frame",
         "targets_delay_applied_twice", "padding_mask_in_seconds", "loader_repeats_batch",
         "stale_token_cache"}


CLEAN = ReferencePipeline(SMALL)
# These faults change how a batch is processed, not the batch: one set of clips serves them all.
GOLDEN = CLEAN.golden_batch(0)


@pytest.fixture(scope="module")
def model() -> Any:
    return CLEAN.build_model(0)


def _trace(name: str | None, model: Any, cfg: RefConfig = SMALL) -> Any:
    p = ReferencePipeline(cfg, faults=[name] if name else [])
    batch = GOLDEN if cfg == SMALL else p.golden_batch(0)
    with record(values=True) as t, torch.no_grad():
        p.step(model, batch, tap)
    return t


@pytest.fixture(scope="module")
def clean_trace(model: Any) -> Any:
    return _trace(None, model)


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    for name in NAMES:
        f = get_fault(name)
        assert f.family == "flat_loss" and f.section == "Loss does not decrease" and f.cause
        assert f.expected_ids and stage_info(f.expected_stage) is not None
        assert f.symptom == "flat-loss"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_fault_builds_and_trains(name: str) -> None:
    p = ReferencePipeline(SMALL, faults=[name])
    model = p.build_model(0)
    out = p.train_step(model, p.build_optimizer(model), GOLDEN)
    assert torch.isfinite(out.loss)


# ---- 5. targets ---------------------------------------------------------------------------------

def test_clean_targets_are_the_tokens(clean_trace: Any) -> None:
    assert np.array_equal(clean_trace.value("targets"), clean_trace.value("tokens"))


def test_targets_random_match_the_tokens_only_by_chance(model: Any) -> None:
    t = _trace("targets_random", model)
    targets, tokens = np.asarray(t.value("targets")), np.asarray(t.value("tokens"))
    assert (targets == tokens).mean() < 0.02  # chance is 1 / 256
    assert len(np.unique(targets)) > 200  # spread over the whole codebook
    again = _trace("targets_random", model)
    assert np.array_equal(again.value("targets"), targets)  # seeded: the fault is reproducible


def test_targets_codebook_index_are_constant_per_codebook(model: Any, clean_trace: Any) -> None:
    targets = np.asarray(_trace("targets_codebook_index", model).value("targets"))  # [B, K, T]
    for k in range(targets.shape[1]):
        assert np.unique(targets[:, k]).tolist() == [k]
    clean = np.asarray(clean_trace.value("targets"))
    assert all(len(np.unique(clean[:, k])) > 10 for k in range(clean.shape[1]))


def test_targets_shifted_one_frame_are_the_next_frame(model: Any) -> None:
    t = _trace("targets_shifted_one_frame", model)
    targets, tokens = np.asarray(t.value("targets")), np.asarray(t.value("tokens"))
    assert np.array_equal(targets[..., :-1], tokens[..., 1:])
    assert (targets == tokens).mean() < 0.7


def test_targets_delay_applied_twice_lag_k_frames(model: Any) -> None:
    t = _trace("targets_delay_applied_twice", model)
    targets, tokens = np.asarray(t.value("targets")), np.asarray(t.value("tokens"))
    assert np.array_equal(targets[:, 0], tokens[:, 0])
    for k in range(1, targets.shape[1]):
        assert np.array_equal(targets[:, k, k:], tokens[:, k, :-k])
        assert (targets[:, k] == tokens[:, k]).mean() < 0.7


# ---- 6. nearly empty mask ---------------------------------------------------------------------

def test_padding_mask_in_seconds_keeps_almost_nothing(model: Any, clean_trace: Any) -> None:
    t = _trace("padding_mask_in_seconds", model, RefConfig(batch_size=4, dim=64, layers=1))
    mask = np.asarray(t.value("mask.loss"))
    assert 0 < mask.mean() <= 0.03
    assert np.asarray(clean_trace.value("mask.loss")).mean() > 0.8


# ---- loaders ------------------------------------------------------------------------------------

def _signature(batch: Any) -> tuple[Any, ...]:
    return tuple(batch.captions), batch.seed


def test_loader_repeats_the_same_batch() -> None:
    batches = list(islice(ReferencePipeline(SMALL, faults=["loader_repeats_batch"]).loader("train", 0), 4))
    assert len({_signature(b) for b in batches}) == 1
    assert all(np.array_equal(a, b) for a, b in zip(batches[0].clips, batches[3].clips))
    clean = list(islice(CLEAN.loader("train", 0), 4))
    assert len({_signature(b) for b in clean}) == 4


def test_stale_token_cache_serves_the_first_segment_for_every_crop(model: Any) -> None:
    def tokens_and_audio(p: ReferencePipeline, seed: int) -> tuple[np.ndarray, np.ndarray]:
        with record(values=["tokens", "audio.cropped", "crop"]) as t, torch.no_grad():
            p.step(model, CLEAN.make_batch(range(4), seed=seed), tap)
        return np.asarray(t.value("tokens")), np.asarray(t.value("audio.cropped")), np.asarray(t.value("crop"))

    p = ReferencePipeline(SMALL, faults=["stale_token_cache"])
    tokens, audio, crops = tokens_and_audio(p, seed=2)
    truth = p.codec.encode(audio)  # independent re-encoding of what the model was shown
    moved = [i for i in range(4) if crops[i, 0] > 0]
    assert moved, "at least one clip should be cropped away from its start"
    for i in moved:  # tokens of the first segment, not of the audio the model saw
        assert not np.array_equal(tokens[i], truth[i])
    again, _, _ = tokens_and_audio(p, seed=3)  # other crops: the same stale tokens come back
    assert all(np.array_equal(tokens[i], again[i]) for i in range(4))
    clean_tokens, clean_audio, _ = tokens_and_audio(CLEAN, seed=2)
    assert np.array_equal(clean_tokens, CLEAN.codec.encode(clean_audio))
