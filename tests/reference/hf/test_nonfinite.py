"""The HF bed's non-finite faults: the first tapped stage that holds NaN/inf is read off a recorded
step, and the loss (or the weights) checked directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_bed_support import check_registered, setup, trace

torch.set_num_threads(1)

NAMES = {"peak_normalise_silent_clips", "nan_blocks_in_float_wavs", "labels_all_ignored", "additive_attention_mask",
         "nan_weight_in_checkpoint"}
FLOAT_STAGES = [
    "audio.original",
    "audio.resampled",
    "audio.mono",
    "audio.cropped",
    "condition.embedding",
    "logits",
    "loss",
]


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("nonfinite", NAMES, "NaN and infinite values")


def _first_nonfinite(t) -> str | None:
    for stage in FLOAT_STAGES:
        if not np.isfinite(np.asarray(t.value(stage), dtype=np.float64)).all():
            return stage
    return None


@pytest.mark.parametrize("name, first", [
    ("peak_normalise_silent_clips", "audio.resampled"),
    ("nan_blocks_in_float_wavs", "audio.original"),
    ("additive_attention_mask", "logits"),
])
def test_first_nonfinite_stage(bed, name: str, first: str) -> None:
    p = bed.with_faults([name])
    model, _ = setup(p)
    for seed in range(3):  # every golden batch, not one lucky draw
        t = trace(p, model, p.golden_batch(seed))
        assert _first_nonfinite(t) == first, seed
    assert _first_nonfinite(trace(bed, setup(bed)[0], bed.golden_batch(0))) is None


def test_peak_normalise_divides_a_silent_clip_by_zero(bed) -> None:
    p = bed.with_faults(["peak_normalise_silent_clips"])
    t = trace(p, setup(p)[0], p.golden_batch(0))
    original, resampled = np.asarray(t.value("audio.original")), np.asarray(t.value("audio.resampled"))
    n = t["audio.resampled"].meta["lengths"]  # the collated batch is zero-padded past each clip
    silent = [i for i in range(len(original)) if not np.abs(original[i]).any()]
    assert silent and all(np.isnan(resampled[i, :, : n[i]]).all() for i in silent)  # 0 / 0 everywhere
    assert all(np.isfinite(resampled[i]).all() for i in range(len(original)) if i not in silent)


def test_additive_attention_mask_makes_the_loss_nan(bed, golden) -> None:
    p = bed.with_faults(["additive_attention_mask"])
    out = p.step(setup(p)[0], golden)
    assert torch.isnan(out.loss) and torch.isnan(out.logits).any()
    assert torch.isfinite(bed.step(setup(bed)[0], golden).loss)


def test_labels_all_ignored_empties_the_loss(bed, golden) -> None:
    p = bed.with_faults(["labels_all_ignored"])
    model, _ = setup(p)
    t = trace(p, model, golden)
    assert (np.asarray(t.value("targets")) == -100).all()
    assert not np.asarray(t.value("mask.loss")).any()
    assert np.asarray(t.value("mask.padding")).mean() > 0.5  # the frames are there; the labels are gone
    assert np.isnan(float(t.value("loss")))
    clean = trace(bed, setup(bed)[0], golden)
    assert np.asarray(clean.value("mask.loss")).mean() > 0.5 and np.isfinite(float(clean.value("loss")))


def test_nan_weight_in_checkpoint(bed, golden) -> None:
    p = bed.with_faults(["nan_weight_in_checkpoint"])
    model, _ = setup(p)
    bad = [n for n, q in model.named_parameters() if not torch.isfinite(q).all()]
    assert bad == ["decoder.model.decoder.layers.0.fc2.weight"]
    out = p.step(model, golden)
    assert torch.isnan(out.loss) and torch.isnan(out.logits).all()
    assert all(torch.isfinite(q).all() for q in setup(bed)[0].parameters())
