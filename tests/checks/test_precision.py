"""Mixed precision: the judge on hand-made runs, bugs written here, the catalogue, and clean amp runs.

Everything runs through `ProtocolView`: the experiments see `amp_dtype` and `scaler`, never the config.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from signalchain.checks.precision import judge_precision
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import run_doctor
from signalchain.experiments.numerics.precision import measure_precision
from signalchain.pipeline import ProtocolView
from signalchain.records.precision import AmpMeasurement, AmpStep
from signalchain.reference import RefConfig, ReferencePipeline
from signalchain.reference.faults import catalogue, get_fault

torch.set_num_threads(1)
SMALL = dict(batch_size=4, segment_seconds=1.0, dim=64, layers=1)


def ids(findings):
    return sorted((f.id, f.stage) for f in findings if f.severity.value != "info")


def steps(*scales: float, moved: bool = False) -> list[AmpStep]:
    return [AmpStep(a, b, 5.0, 1.0, b < a, moved or not b < a) for a, b in zip(scales, scales[1:])]


def measure(pipeline, seed: int = 0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return measure_precision(Context(ProtocolView(pipeline), seed=seed, budget=BUDGETS["economy"]))


# ---- the judge ----------------------------------------------------------------------------------

def test_a_scale_that_settles_is_not_a_finding() -> None:
    rep = AmpMeasurement("float16", True, steps(2.0**18, 2.0**17, 2.0**16, 2.0**16, 2.0**16, 2.0**16))
    rep.unscaled_grad_norm = 1.0
    assert judge_precision(rep) == []


def test_repeated_skips_with_finite_unscaled_gradients_are_skipped_steps_not_a_collapse() -> None:
    rep = AmpMeasurement("float16", True, steps(2.0**16, 2.0**15, 2.0**15, 2.0**14, 2.0**14, 2.0**13))
    rep.steps[1].skipped = rep.steps[3].skipped = False
    rep.unscaled_grad_norm = 1.0
    (f,) = judge_precision(rep)
    assert (f.id, f.severity.value, f.stage) == ("amp.steps_skipped", "error", "optimizer") and "3 of 5" in f.message


def test_non_finite_gradients_at_scale_one_collapse_the_scale() -> None:
    rep = AmpMeasurement("float16", True, steps(2.0**16, 2.0**15, 2.0**14, 2.0**13), unscaled_nonfinite=["w"])
    rep.unscaled_grad_norm = float("nan")
    assert ids(judge_precision(rep)) == [("amp.scale_collapse", "optimizer"), ("amp.steps_skipped", "optimizer")]


def test_a_scale_below_one_is_a_collapse_whatever_the_gradients() -> None:
    rep = AmpMeasurement("float16", True, steps(1.0, 0.5, 0.25))
    assert ("amp.scale_collapse", "optimizer") in ids(judge_precision(rep))


def test_a_stage_beyond_its_tolerance_is_a_mismatch_at_that_stage() -> None:
    rep = AmpMeasurement("bfloat16", False, stage_errors={"logits": 0.005, "loss": 0.2},
                    stage_tolerance={"logits": 0.125, "loss": 0.031}, first_divergence="loss")
    (f,) = judge_precision(rep)
    assert (f.id, f.stage, f.severity.value) == ("amp.precision_mismatch", "loss", "error")


# ---- bugs written here ----------------------------------------------------------------------------

class GrowingScaler(ReferencePipeline):
    """A scaler told to grow fast (growth_factor 2**20 every step): it overflows after the first step and
    then only halves, one skipped step at a time."""

    def build_optimizer(self, model):
        opt = super().build_optimizer(model)
        self._scalers[opt] = self._last_scaler = torch.amp.GradScaler("cpu", growth_factor=2.0**20, growth_interval=1)
        return opt


class WhereLogEntropy(ReferencePipeline):
    """An entropy-like bonus on the squared logits of valid positions, guarded by `where`: the forward is
    finite, but at the masked positions (r = 0) the gradient of r·log r is 0·(-inf) = NaN, at any scale."""

    def compute_loss(self, logits, targets, mask):
        loss, per_codebook = super().compute_loss(logits, targets, mask)
        r = logits.float().pow(2) * mask[..., None]
        ent = torch.where(r > 0, r * r.log(), torch.zeros_like(r)).mean()
        return loss - 1e-3 * ent, per_codebook


class ExpSumPenalty(ReferencePipeline):
    """A partition-function penalty summed in the logits' dtype: 819 200 values near exp(0) = 1 sum past
    float16's 65 504."""

    def compute_loss(self, logits, targets, mask):
        loss, per_codebook = super().compute_loss(logits, targets, mask)
        return loss + 1e-6 * logits.exp().sum().float(), per_codebook


class SinusoidalFrameBias(ReferencePipeline):
    """A sinusoidal per-frame bias computed in the logits' dtype: in bfloat16, frame * 3.7 near 370 is
    rounded to a multiple of 2, so the sine is wrong by up to 1 radian."""

    def build_model(self, seed):
        model = super().build_model(seed)
        predict = model.compute_predictions

        def compute_predictions(codes, cond, cond_mask):
            logits, mask = predict(codes, cond, cond_mask)
            frames = torch.arange(logits.shape[2], dtype=logits.dtype)
            return logits + 0.1 * torch.sin(frames * 3.7)[None, None, :, None], mask

        model.compute_predictions = compute_predictions
        return model


def test_own_growing_scaler_skips_steps() -> None:
    rep = measure(GrowingScaler(RefConfig(amp="fp16", **SMALL)))
    assert [s.skipped for s in rep.steps] == [False, True, True]
    assert not rep.unscaled_nonfinite
    assert ids(judge_precision(rep)) == [("amp.steps_skipped", "optimizer")]


def test_own_where_log_nan_gradient_collapses_the_scale() -> None:
    rep = measure(WhereLogEntropy(RefConfig(amp="fp16", **SMALL)))
    assert all(s.skipped for s in rep.steps) and rep.unscaled_nonfinite
    assert ("amp.scale_collapse", "optimizer") in ids(judge_precision(rep))


def test_own_float16_exp_sum_overflow_is_located() -> None:
    rep = measure(ExpSumPenalty(RefConfig(amp="fp16", **SMALL)))
    found = [f for f in judge_precision(rep) if f.id == "amp.overflow"]
    assert found and found[0].stage == "loss" and found[0].evidence["op"] == "aten.sum.default"


def test_own_bfloat16_sinusoid_mismatch_names_stage_and_op() -> None:
    rep = measure(SinusoidalFrameBias(RefConfig(amp="bf16", **SMALL)))
    assert rep.first_divergence == "logits" and rep.op_divergence is not None
    assert (
        rep.op_divergence.op.split(".")[1] in ("mul", "sin", "add")
        and "test_precision.py" in rep.op_divergence.location
    )
    assert ids(judge_precision(rep)) == [("amp.precision_mismatch", "logits")]


# ---- clean runs and the catalogue --------------------------------------------------------------------

@pytest.mark.parametrize("amp, seed", [("bf16", 0), ("bf16", 1), ("bf16", 2), ("bf16", 3), ("bf16", 4),
                                       ("fp16", 0), ("fp16", 3)])
def test_clean_mixed_precision_is_silent(amp: str, seed: int) -> None:
    rep = measure(ReferencePipeline(RefConfig(amp=amp, **SMALL)), seed)
    assert not any(s.skipped for s in rep.steps) and rep.first_divergence is None
    assert judge_precision(rep) == []


def test_full_precision_pipeline_gets_one_info_finding() -> None:
    (f,) = run_doctor(ProtocolView(ReferencePipeline(RefConfig(**SMALL))), families=["precision"]).findings
    assert f.severity.value == "info" and f.id == "pipeline.capability_missing"


@pytest.mark.parametrize("name", [f.name for f in catalogue("precision")])
def test_precision_family_detects_and_localises_each_precision_fault(name: str) -> None:
    fault = get_fault(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = run_doctor(
            ProtocolView(ReferencePipeline(faults=[name])), families=["precision"], budget="economy"
        ).findings
    hits = [f for f in found if f.id in fault.expected_ids and f.severity.value in ("warning", "error")]
    assert hits and any(f.stage == fault.expected_stage for f in hits), ids(found)
