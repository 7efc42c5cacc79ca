"""Numerics checks: hand-made reports, state scans of bugs written here, and the family on the catalogue.

The catalogue runs through `ProtocolView` (no detector sees a fault name); the clean reference must
stay silent over five seeds.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from signalchain.checks.numerics import judge_locate, judge_numerics, judge_state
from signalchain.checks.numerics_causes import likely_cause, stage_cause
from signalchain.experiments.doctor import SYMPTOMS, run_doctor
from signalchain.experiments.numerics.state import scan_state
from signalchain.pipeline import ProtocolView
from signalchain.records.numerics import (
    LocateMeasurement,
    NumericsMeasurement,
    OpEvent,
    StageStatus,
)
from signalchain.reference import ReferencePipeline
from signalchain.reference.faults import catalogue, get_fault

torch.set_num_threads(1)


def ev(op: str, kind: str = "born", phase: str = "forward", **kw) -> OpEvent:
    base = dict(order=10, kind=kind, op=op, phase=phase, module="m", stage="logits", dtype="float32",
                shape=[4], nan=4, inf=0, numel=4)
    return OpEvent(**{**base, **kw})


def report(events=(), stages=(), loss=float("nan"), **kw) -> LocateMeasurement:
    base = dict(events=list(events), stages=list(stages), loss=loss, loss_stage="loss", grads_nonfinite=[],
                params_nonfinite_after=[], batch_nonfinite=[])
    return LocateMeasurement(**{**base, **kw})


def ids(findings):
    return sorted((f.id, f.stage) for f in findings if f.severity.value != "info")


# ---- causes, from the op and its input statistics -----------------------------------------------

@pytest.mark.parametrize("event, cause", [
    (ev("aten.mean.default", inputs=[{"numel": 0, "shape": [0], "dtype": "float32"}]), "empty_reduction"),
    (ev("aten._softmax.default", inputs=[{"nan": 0, "inf": 9, "all_neg_inf_rows": 3, "rows": 12}]), "invalid_mask"),
    (ev("aten.exp.default", inf=4, nan=0, inputs=[{"nan": 0, "inf": 0, "max": 95.0, "dtype": "float32"}]),
     "exp_overflow"),
    (ev("aten.log.default", inf=4, nan=0, inputs=[{"nan": 0, "inf": 0, "min": 0.0, "zero_fraction": 0.5}]),
     "log_domain"),
    (ev("aten.native_layer_norm.default", inputs=[{"nan": 0, "inf": 0, "constant_rows": 2, "rows": 8}], scalars=[0.0]),
     "normalisation"),
    (ev("aten.div.Tensor", inputs=[{"nan": 0, "inf": 0}, {"nan": 0, "inf": 0, "zero_fraction": 0.25}]),
     "division_by_zero"),
    (ev("aten.mul.Tensor", phase="backward", forward_op="aten.sqrt.default (SqrtBackward0)"), "division_by_zero"),
    (ev("aten.sum.default", dtype="float16", fp32_finite=True, inf=1, nan=0,
        inputs=[{"nan": 0, "inf": 0, "abs_max": 30.0}]),
     "low_precision"),
    (ev("aten.addcdiv_.default", phase="optimizer", target="w", inputs=[{}, {}, {"nan": 0, "zero_fraction": 0.1}]),
     "division_by_zero"),  # Adam's sqrt(v) + eps = 0 where the gradient is 0: 0/0, whatever the rate
    (ev("aten.add_.Tensor", phase="optimizer", target="w", inputs=[{"nan": 0}, {"nan": 0, "inf": 3}]), "huge_update"),
    (ev("aten.addmm.default", kind="state", target="fc.weight"), "state"),
])
def test_likely_cause_reads_the_op_and_its_inputs(event: OpEvent, cause: str) -> None:
    key, why, hint = likely_cause(event)
    assert key == cause and why and hint


def test_stage_cause_blames_a_silent_example_for_a_division() -> None:
    prev = StageStatus("audio.resampled", 3, "float", row_abs_max=[0.5, 0.0, 0.3])
    bad = StageStatus("audio.mono", 4, "float", nan=10, examples=[1], all_bad_examples=[1])
    key, why, _ = stage_cause(bad, prev)
    assert key == "division_by_zero" and "[1]" in why


def test_a_loss_made_non_finite_by_excluded_positions_is_a_reduction_over_them() -> None:
    """AudioCraft's NaN fill where its mask is False (issue 41, messages): the logits are finite where
    the loss counts, so the message must not send the user after an overflow in the model."""
    stages = [StageStatus("logits", 3, "float", nan=12288, numel=40000, masked_out_only=True),
              StageStatus("loss", 4, "float", nan=1, numel=1)]
    key, why, hint = stage_cause(stages[1], stages[0])
    assert key == "masked_reduction" and "12288 NaN" in why and "logits[mask]" in hint
    f = [x for x in judge_locate(report([], stages)) if x.id == "nonfinite.first"]
    assert f and f[0].stage == "loss" and "finite at every position the loss counts" in f[0].message
    assert stage_cause(stages[1], StageStatus("logits", 3, "float", numel=40000))[0] == "unknown"


# ---- the judge ----------------------------------------------------------------------------------

def test_first_op_beats_a_later_stage_and_the_loss_is_named() -> None:
    stages = [
        StageStatus("condition.embedding", 5, "float", nan=3, numel=10),
        StageStatus("loss", 20, "float", nan=1, numel=1),
    ]
    f = judge_locate(report([ev("aten.div.Tensor", order=4, stage="condition.embedding")], stages))
    assert ids(f) == [("nonfinite.first", "condition.embedding"), ("nonfinite.loss", "loss")]


def test_a_stage_that_goes_bad_without_a_torch_op_is_blamed_itself() -> None:
    stages = [StageStatus("audio.original", 1, "float", numel=10, row_abs_max=[1.0, 0.0]),
              StageStatus("audio.mono", 2, "float", nan=5, numel=10, examples=[1], all_bad_examples=[1])]
    (f,) = judge_locate(report([], stages, loss=None, error="ValueError: refused"))
    assert (f.id, f.stage) == ("nonfinite.first", "audio.mono") and f.evidence["cause"] == "division_by_zero"
    assert "refused" in f.message


def test_a_bad_first_stage_or_batch_is_an_input_problem() -> None:
    stages = [StageStatus("features", 1, "float", nan=1, numel=10)]
    (f,) = judge_locate(report([], stages, loss=None, batch_nonfinite=["batch['x']"]))
    assert (f.id, f.stage) == ("nonfinite.input", "features") and "batch['x']" in f.message
    (f,) = judge_locate(report([], [StageStatus("audio.original", 1, "float", nan=1, numel=10)], loss=None))
    assert (f.id, f.stage) == ("nonfinite.input", "audio.original")  # the decoded input audio itself


def test_a_bad_first_tap_after_a_finite_batch_is_not_blamed_on_the_input() -> None:
    (f,) = judge_locate(report([], [StageStatus("features", 1, "float", nan=1, numel=10)], loss=None))
    assert (f.id, f.stage, f.evidence["cause"]) == ("nonfinite.first", "features", "unknown")


def test_nan_only_outside_the_loss_mask_and_a_fill_are_not_findings() -> None:
    stages = [StageStatus("logits", 3, "float", nan=40, numel=100, masked_out_only=True)]
    assert judge_locate(report([ev("aten.masked_fill.Scalar", kind="fill")], stages, loss=2.3)) == []


def test_scaled_gradient_overflow_is_left_to_the_scaler() -> None:
    rep = report([ev("aten.mm.default", phase="backward", inf=8, nan=0)],
                 [StageStatus("grad.norm", 30, "float", phase="after backward", nan=1, numel=1)],
                 loss=5.0, grads_nonfinite=["w"], scaled=True, unscaled_grads_finite=True)
    assert judge_locate(rep) == []
    rep.unscaled_grads_finite = False  # non-finite at scale 1 too: a real bug
    assert ids(judge_locate(rep)) == [("nonfinite.first", "logits")]


def test_a_finite_loss_with_a_nonfinite_stage_is_a_warning() -> None:
    (f,) = judge_locate(report([], [StageStatus("condition.embedding", 3, "float", nan=2, numel=10)], loss=1.0))
    assert f.severity.value == "warning"


# ---- state scans, on bugs written here -----------------------------------------------------------

def test_state_scan_finds_bad_weights_buffers_and_moments() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    clean = scan_state(model, opt, 0)
    assert clean.issues == [] and clean.optimizer_tensors == 8  # 4 parameters x (exp_avg, exp_avg_sq)
    with torch.no_grad():
        model[0].weight[1, 2] = 3e5  # absurd
        model[1].running_var[0] = float("nan")  # a NaN statistic in a buffer
        opt.state[model[0].bias]["exp_avg_sq"][0] = -1.0  # a second moment cannot be negative
    found = {(f.id, f.stage, f.severity.value) for f in judge_state(scan_state(model, opt, 0))}
    assert found == {("nonfinite.state", "model", "error"), ("nonfinite.state", "model", "warning"),
                     ("nonfinite.optimizer_state", "optimizer", "error")}
    after = judge_state(scan_state(model, opt, 3), clean)
    assert {f.stage for f in after} == {"optimizer"}  # new since the first scan: written by updates


def test_judge_numerics_drops_the_update_consequences_of_a_bad_step() -> None:
    model = nn.Linear(2, 2)
    clean = scan_state(model, None, 0)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    rep = NumericsMeasurement(
        before=clean,
        after=scan_state(model, None, 1),
        updates=1,
        losses=[math.nan],
        grad_norms=[],
        trigger="loss",
        trigger_step=0,
        locate=report([ev("aten.log.default", stage="loss")], []),
    )
    assert ids(judge_numerics(rep)) == [("nonfinite.first", "loss"), ("nonfinite.loss", "loss")]


# ---- the family on the catalogue and on the clean reference ------------------------------------

def doctor(faults=(), seed: int = 0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_doctor(ProtocolView(ReferencePipeline(faults=faults)), families=["numerics"], seed=seed,
                          budget="economy").findings


@pytest.mark.parametrize("name", [f.name for f in catalogue("nonfinite")])
def test_numerics_family_detects_and_localises_each_nonfinite_fault(name: str) -> None:
    fault = get_fault(name)
    hits = [f for f in doctor([name]) if f.id in fault.expected_ids and f.severity.value == "error"]
    assert hits, name
    assert any(f.stage == fault.expected_stage for f in hits), [(f.id, f.stage) for f in hits]


def test_numerics_family_finds_the_float16_overflowed_loss() -> None:
    assert ("nonfinite.loss", "loss") in ids(doctor(["fp16_zloss_sum_overflow"]))


@pytest.mark.parametrize("seed", range(5))
def test_numerics_family_is_silent_on_the_clean_reference(seed: int) -> None:
    assert ids(doctor(seed=seed)) == []


def test_symptoms_select_the_numerics_and_precision_families() -> None:
    assert {"numerics", "precision"} <= set(SYMPTOMS["nan"]) and {"numerics", "precision"} <= set(SYMPTOMS["unstable"])
