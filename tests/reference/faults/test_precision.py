"""The mixed-precision faults: skipped steps, a collapsing scale, a float16 overflow, a mismatch.

Measured on the scaler's scale (the `amp.scale` tap), on the parameters (a skipped step leaves
them bit-identical) and on the loss of the same batch and weights with and without autocast,
never through a detector.
"""

from __future__ import annotations

import warnings
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
FULL_BATCH = RefConfig(dim=64, layers=1, warmup_steps=1)  # the default golden batch: 8 clips of 2 s
NAMES = {"scaler_init_scale_huge", "scale_collapse_nan_grad", "fp16_zloss_sum_overflow", "bf16_running_mean_loss"}
GOLDEN = ReferencePipeline(SMALL).golden_batch(0)


@pytest.fixture(scope="module")
def full_golden() -> Any:
    return ReferencePipeline(FULL_BATCH).golden_batch(0)


def _train(name: str | None, steps: int, cfg: RefConfig = SMALL) -> tuple[list[float], bool]:
    """The scale after each of `steps` updates, and whether any parameter moved."""
    p = ReferencePipeline(cfg, faults=[name] if name else [])
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    before = [q.detach().clone() for q in model.parameters()]
    scales = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a skipped step makes the scheduler warn about the order
        for _ in range(steps):
            with record(values=True, stages=["amp.scale"]) as t:
                p.train_step(model, opt, GOLDEN, tap)
            scales.append(float(t.value("amp.scale")))
    moved = any(not torch.equal(b, q.detach()) for b, q in zip(before, model.parameters()))
    return scales, moved


def _loss(p: ReferencePipeline, model: Any, batch: Any, amp: str | None) -> float:
    """The loss of one step with the pipeline's precision set to `amp`, same weights and batch."""
    saved, p.cfg.amp = p.cfg.amp, amp
    try:
        with torch.no_grad():
            return float(p.step(model, batch).loss)
    finally:
        p.cfg.amp = saved


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    assert NAMES <= {f.name for f in catalogue("precision")}
    for name in NAMES:
        f = get_fault(name)
        assert f.section == "Mixed-precision failures" and f.cause and f.symptom
        assert any(i.startswith("amp.") for i in f.expected_ids) and stage_info(f.expected_stage) is not None
        assert ReferencePipeline(SMALL, faults=[name]).cfg.amp in ("fp16", "bf16")


def test_the_clean_fp16_run_steps_at_a_steady_scale() -> None:
    scales, moved = _train(None, 4, RefConfig(**{**SMALL.to_dict(), "amp": "fp16"}))
    assert moved and scales == [65536.0] * 4


def test_scaler_init_scale_huge_skips_every_step_at_a_huge_scale() -> None:
    scales, moved = _train("scaler_init_scale_huge", 6)
    assert not moved  # six skipped steps: not one weight changed
    assert all(b == a / 2 for a, b in zip(scales, scales[1:]))  # backed off after every step
    assert scales[-1] > 2.0**30  # still enormous: this is not a collapse


def test_scale_collapse_skips_every_step_and_halves_the_scale_towards_zero() -> None:
    scales, moved = _train("scale_collapse_nan_grad", 6)
    assert not moved
    assert all(b == a / 2 for a, b in zip(scales, scales[1:])) and scales[-1] <= 65536 / 2**6
    # The cause is scale-independent: the unscaled float32 gradients themselves are NaN.
    p = ReferencePipeline(SMALL, faults=["scale_collapse_nan_grad"])
    model = p.build_model(0)
    p.cfg.amp = None
    p.step(model, GOLDEN).loss.backward()
    assert any(q.grad is not None and torch.isnan(q.grad).any() for q in model.text_encoder.parameters())


def test_fp16_zloss_sum_overflows_only_in_float16(full_golden: Any) -> None:
    p = ReferencePipeline(FULL_BATCH, faults=["fp16_zloss_sum_overflow"])
    model = p.build_model(0)
    with record(values=True, stages=["logits", "loss"]) as t, torch.no_grad():
        p.step(model, full_golden, tap)
    assert np.isfinite(np.asarray(t.value("logits"), dtype=np.float64)).all()  # the overflow is in the loss
    assert np.isinf(float(t.value("loss")))
    assert np.isfinite(_loss(p, model, full_golden, None))  # the same code in float32
    clean = ReferencePipeline(FULL_BATCH)
    assert np.isfinite(_loss(clean, model, full_golden, "fp16"))


def test_bf16_running_mean_loss_differs_materially_from_float32(full_golden: Any) -> None:
    p = ReferencePipeline(FULL_BATCH, faults=["bf16_running_mean_loss"])
    model = p.build_model(0)
    low, full = _loss(p, model, full_golden, "bf16"), _loss(p, model, full_golden, None)
    assert abs(low - full) / full > 0.1
    clean = ReferencePipeline(FULL_BATCH)
    low, full = _loss(clean, model, full_golden, "bf16"), _loss(clean, model, full_golden, None)
    assert abs(low - full) / full < 0.01
