"""The non-finite faults: each goes NaN or inf where the method says, and the clean run never does.

The first non-finite stage is found directly, by walking the recorded tap values in order; the
state faults are read off the parameters and the optimiser state. No detector is involved.
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
# Faults that go non-finite in the first step, at the tap stage they declare.
AT_A_TAP = {"silent_clip_std_division": "audio.mono", "kl_soft_targets_log_zero": "loss",
            "cond_layernorm_eps_zero": "condition.embedding", "logit_scale_raw_init": "logits",
            "fp16_norm_eps_underflow": "condition.embedding", "nan_sample_in_clip": "audio.original",
            "per_codebook_mean_empty": "loss", "cross_attention_no_null_slot": "logits"}
IN_STATE = {"adam_eps_zero", "nan_weight_from_checkpoint", "nan_adam_state_resumed"}
GOLDEN = ReferencePipeline(SMALL).golden_batch(0)  # seed 0: its first caption is dropped
PATTERN_STEPS = int(SMALL.segment_seconds * 50) + 3  # T + K - 1 at 50 frames/s, K = 4
MODEL_STAGES = ["condition.embedding", "targets", "logits", "mask.loss", "loss", "loss.per_codebook"]


def _finite(value: Any) -> bool:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return True  # captions, metadata
    return bool(np.isfinite(array).all())


def _trace(p: ReferencePipeline, model: Any, stages: list[str] | None = None) -> tuple[Any, Exception | None]:
    """Record one step (only `stages` when given: audio summaries are costly); a step that
    raises, as the real bug makes it, keeps the taps it made."""
    error = None
    with record(values=True, stages=stages) as t, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            p.step(model, GOLDEN, tap)
        except ValueError as exc:
            error = exc
    return t, error


def _first_nonfinite(trace: Any) -> str | None:
    return next((r.name for r in trace if not _finite(trace.value(r.name))), None)


def _params_finite(model: Any) -> bool:
    return all(bool(torch.isfinite(q).all()) for q in model.parameters())


def _state_finite(opt: Any) -> bool:
    return all(bool(torch.isfinite(v).all()) for s in opt.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


@pytest.fixture(scope="module")
def model() -> Any:
    return ReferencePipeline(SMALL).build_model(0)


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    assert set(AT_A_TAP) | IN_STATE <= {f.name for f in catalogue("nonfinite")}
    for name in set(AT_A_TAP) | IN_STATE:
        f = get_fault(name)
        assert f.section == "NaN and infinite values" and f.cause and f.symptom == "nan"
        assert all(i.startswith("nonfinite.") for i in f.expected_ids)
        assert stage_info(f.expected_stage) is not None


def test_the_clean_step_and_update_stay_finite(model: Any) -> None:
    p = ReferencePipeline(SMALL)
    trace, error = _trace(p, model)
    assert error is None and _first_nonfinite(trace) is None
    m = p.build_model(0)
    opt = p.build_optimizer(m)
    for _ in range(2):
        assert torch.isfinite(p.train_step(m, opt, GOLDEN).loss)
    assert _params_finite(m) and _state_finite(opt)


@pytest.mark.parametrize("name", sorted(AT_A_TAP))
def test_the_first_nonfinite_tap_is_the_declared_stage(name: str) -> None:
    p = ReferencePipeline(SMALL, faults=[name])
    trace, error = _trace(p, p.build_model(0))
    assert _first_nonfinite(trace) == AT_A_TAP[name] == get_fault(name).expected_stage
    if name == "silent_clip_std_division":  # the codec refuses NaN audio: the step raises there
        assert error is not None and "non-finite" in str(error) and "tokens" not in trace
    else:
        assert error is None


def test_silent_clip_is_finite_until_divided_by_its_zero_std() -> None:
    p = ReferencePipeline(SMALL, faults=["silent_clip_std_division"])
    trace, _ = _trace(p, None, ["audio.original", "audio.mono"])
    original, mono = np.asarray(trace.value("audio.original")), np.asarray(trace.value("audio.mono"))
    assert np.all(original[1] == 0) and np.isfinite(original).all()
    bad = [i for i in range(len(mono)) if not np.isfinite(mono[i]).all()]
    assert bad == [1] and np.isnan(mono[1]).all()


def test_nan_sample_in_clip_is_one_sample(model: Any) -> None:
    trace, _ = _trace(ReferencePipeline(SMALL, faults=["nan_sample_in_clip"]), model, ["audio.original"])
    audio = np.asarray(trace.value("audio.original"))
    instants = np.isnan(audio).any(axis=1)  # [B, T]: one time instant, in every channel
    assert instants.sum() == 1 and instants[2].any()


def test_log_zero_and_empty_mean_give_a_nan_loss_from_finite_logits(model: Any) -> None:
    stages = ["logits", "mask.loss", "loss", "loss.per_codebook"]
    for name in ("kl_soft_targets_log_zero", "per_codebook_mean_empty"):
        trace, _ = _trace(ReferencePipeline(SMALL, faults=[name]), model, stages)
        assert _finite(trace.value("logits")) and np.isnan(float(trace.value("loss")))
    # `trace` is now per_codebook_mean_empty's: NaN exactly for the codebooks with nothing selected
    empty = ~np.asarray(trace.value("mask.loss")).any(axis=(0, 2))  # [K]
    per_codebook = np.asarray(trace.value("loss.per_codebook"))
    assert empty.any() and np.array_equal(np.isnan(per_codebook), empty)


def test_zero_condition_slots_go_nan_only_where_the_statistics_are_invalid() -> None:
    for name in ("cond_layernorm_eps_zero", "fp16_norm_eps_underflow"):
        p = ReferencePipeline(SMALL, faults=[name])
        trace, _ = _trace(p, p.build_model(0), ["condition.mask", "condition.embedding"])
        cond = np.asarray(trace.value("condition.embedding"), dtype=np.float64)  # [B, L, D]
        valid = np.asarray(trace.value("condition.mask"))  # [B, L]
        assert np.isnan(cond[~valid]).all() and np.isfinite(cond[valid]).all()


def test_fp16_norm_eps_underflow_is_safe_in_float32() -> None:
    p = ReferencePipeline(SMALL, faults=["fp16_norm_eps_underflow"])
    assert p.cfg.amp == "fp16"
    m = p.build_model(0)
    p.cfg.amp = None  # the same code, the same weights and batch, in full precision
    trace, _ = _trace(p, m, MODEL_STAGES)
    assert _first_nonfinite(trace) is None


def test_logit_scale_overflow_makes_every_logit_infinite() -> None:
    p = ReferencePipeline(SMALL, faults=["logit_scale_raw_init"])
    trace, _ = _trace(p, p.build_model(0), ["condition.embedding", "logits"])
    assert _finite(trace.value("condition.embedding"))
    assert np.isinf(np.asarray(trace.value("logits"))).mean() > 0.99


def test_all_masked_attention_rows_are_the_dropped_captions() -> None:
    p = ReferencePipeline(SMALL, faults=["cross_attention_no_null_slot"])
    trace, _ = _trace(p, p.build_model(0), ["condition.dropped", "logits"])
    dropped = np.asarray(trace.value("condition.dropped"))
    logits = np.asarray(trace.value("logits"))
    nan_rows = np.isnan(logits).reshape(len(logits), -1).all(axis=1)
    assert dropped.any() and np.array_equal(nan_rows, dropped)
    assert np.isfinite(logits[~dropped]).all()


def test_adam_eps_zero_writes_nan_into_weights_from_finite_gradients() -> None:
    p = ReferencePipeline(SMALL, faults=["adam_eps_zero"])
    m = p.build_model(0)
    opt = p.build_optimizer(m)
    assert _params_finite(m)
    p.step(m, GOLDEN).loss.backward()
    assert all(bool(torch.isfinite(q.grad).all()) for q in m.parameters() if q.grad is not None)
    opt.step()
    assert not _params_finite(m)
    unused_positions = m.positions.weight[PATTERN_STEPS:]
    assert torch.isnan(unused_positions).all()  # zero gradient -> 0 / 0
    assert _state_finite(opt)  # the moments are fine: the update itself is the culprit



def test_nan_weight_from_checkpoint_is_in_the_model_before_any_step() -> None:
    p = ReferencePipeline(SMALL, faults=["nan_weight_from_checkpoint"])
    m = p.build_model(0)
    bad = [n for n, q in m.named_parameters() if not torch.isfinite(q).all()]
    assert bad == ["blocks.0.mlp.0.weight"]
    trace, _ = _trace(p, m, MODEL_STAGES)
    assert _first_nonfinite(trace) == "logits"  # downstream of the state, with a finite condition


def test_nan_adam_state_resumed_poisons_the_weights_at_the_first_update() -> None:
    p = ReferencePipeline(SMALL, faults=["nan_adam_state_resumed"])
    m = p.build_model(0)
    opt = p.build_optimizer(m)
    assert _params_finite(m) and not _state_finite(opt)
    first = p.train_step(m, opt, GOLDEN)
    assert torch.isfinite(first.loss) and not _params_finite(m)
    assert torch.isnan(p.train_step(m, opt, GOLDEN).loss)
