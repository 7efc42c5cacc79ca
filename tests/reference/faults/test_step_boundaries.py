"""The step-boundary faults: the agreements AudioCraft's solver asserts, broken the silent way.

Each test reads the shapes and counts off the taps (batch size against metadata count, logits
against targets and loss mask) and checks that the step still runs, as the silent bug does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import catalogue, get_fault
from signalchain.trace.vocabulary import stage_info

torch.set_num_threads(1)

SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=64, layers=1, warmup_steps=1)
NAMES = {"metadata_dropped_for_short_clip", "targets_missing_last_frame", "loss_mask_broadcast"}
CLEAN = ReferencePipeline(SMALL)
STAGES = ["audio.original", "caption", "metadata", "targets", "logits", "mask.loss", "loss"]


@pytest.fixture(scope="module")
def model() -> Any:
    return CLEAN.build_model(0)


def _trace(p: ReferencePipeline, model: Any) -> Any:
    with record(values=["metadata", "caption", "targets", "mask.loss", "loss"], stages=STAGES) as t, torch.no_grad():
        p.step(model, p.golden_batch(0), tap)
    return t


@pytest.fixture(scope="module")
def clean_trace(model: Any) -> Any:
    return _trace(CLEAN, model)


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    assert NAMES <= {f.name for f in catalogue("step_boundaries")}
    for name in NAMES:
        f = get_fault(name)
        assert f.section == "Real-world example: tracing MusicGen's training step" and f.cause
        assert f.expected_ids and stage_info(f.expected_stage) is not None


@pytest.mark.parametrize("name", sorted(NAMES))
def test_fault_trains_silently(name: str) -> None:
    p = ReferencePipeline(SMALL, faults=[name])
    model = p.build_model(0)
    out = p.train_step(model, p.build_optimizer(model), p.golden_batch(0))
    assert torch.isfinite(out.loss)


def test_clean_shapes_agree(clean_trace: Any) -> None:
    t = clean_trace
    batch = t["audio.original"].shape[0]
    assert len(t.value("metadata")) == len(t.value("caption")) == batch
    assert t["targets"].shape == t["logits"].shape[:3] == t["mask.loss"].shape


def test_metadata_dropped_for_short_clip(model: Any, clean_trace: Any) -> None:
    t = _trace(ReferencePipeline(SMALL, faults=["metadata_dropped_for_short_clip"]), model)
    batch = t["audio.original"].shape[0]
    assert len(t.value("caption")) == batch == SMALL.batch_size
    assert len(t.value("metadata")) == batch - 1
    assert t.value("metadata") == clean_trace.value("metadata")[:-1]  # the short clip's is lost


def test_targets_missing_last_frame(model: Any, clean_trace: Any) -> None:
    t = _trace(ReferencePipeline(SMALL, faults=["targets_missing_last_frame"]), model)
    logits, targets = t["logits"].shape, t["targets"].shape
    assert targets[:2] == logits[:2] and targets[2] == logits[2] - 1
    assert np.array_equal(t.value("targets"), clean_trace.value("targets")[..., :-1])  # aligned, one short
    assert float(t.value("loss")) == pytest.approx(float(clean_trace.value("loss")), abs=0.05)


def test_loss_mask_broadcast(model: Any, clean_trace: Any) -> None:
    t = _trace(ReferencePipeline(SMALL, faults=["loss_mask_broadcast"]), model)
    mask, targets = t["mask.loss"].shape, t["targets"].shape
    codebooks = targets[1]
    assert mask == [targets[0], 1, targets[2]] and mask != targets
    # It broadcasts over the same positions, but the mean divides by K times too few of them.
    assert float(t.value("loss")) == pytest.approx(codebooks * float(clean_trace.value("loss")), rel=1e-4)
