"""Targets visible in the model's inputs, judged from the ids entering its embeddings."""

import numpy as np

from _traces import codec_like_tokens, hf_step_trace
from signalchain.checks.inputs import judge_target_leak


def _labels(trace):
    return np.asarray(trace.value("targets"))  # [B, T', K]


def test_shifted_decoder_inputs_are_fine_and_unshifted_ones_are_the_targets():
    trace = hf_step_trace(codec_like_tokens())
    labels = np.where(_labels(trace) == -100, 64, _labels(trace)).transpose(0, 2, 1)  # [B, K, T']
    shifted = np.concatenate([np.full(labels.shape[:2] + (1,), 64), labels[..., :-1]], axis=-1)
    text = {"module": "text_encoder.embed_tokens", "ids": np.zeros((4, 12), np.int64)}
    ok = [text] + [{"module": f"embed_tokens.{k}", "ids": shifted[:, k]} for k in range(4)]
    assert judge_target_leak(trace, ok) == []
    leak = [text] + [{"module": f"embed_tokens.{k}", "ids": labels[:, k]} for k in range(4)]
    f = judge_target_leak(trace, leak)
    assert [(x.id, x.stage) for x in f] == [("targets.misaligned", "targets")]
    assert f[0].evidence["same_position"] == 1.0 and f[0].evidence["previous_position"] < 1.0
    # [B*K, T'] inputs (one embedding for every codebook) are read too.
    assert judge_target_leak(trace, [{"module": "embed", "ids": labels.reshape(16, -1)}])


def test_repetitive_tokens_do_not_make_shifted_inputs_look_like_a_leak():
    toks = np.repeat(codec_like_tokens()[..., :10], 5, axis=-1)  # every code held for 5 frames
    trace = hf_step_trace(toks)
    labels = np.where(_labels(trace) == -100, 64, _labels(trace)).transpose(0, 2, 1)
    shifted = np.concatenate([np.full(labels.shape[:2] + (1,), 64), labels[..., :-1]], axis=-1)
    assert judge_target_leak(trace, [{"module": "e", "ids": shifted.reshape(16, -1)}]) == []


# ---- what the model reads, as tapped: tokens.input (or a tokens.pattern that holds it) ----------

import pytest  # noqa: E402

from _decoder_inputs import audiocraft_trace, hf_inputs_trace, pattern_sequence  # noqa: E402
from signalchain.checks.inputs import judge_tapped_inputs  # noqa: E402


def _ids(findings):
    return [(f.id, f.severity.value, f.stage) for f in findings]


@pytest.mark.parametrize("layout", ["BKT", "BTK", "(BK)T"])
@pytest.mark.parametrize("seed", range(3))
def test_inputs_shifted_behind_the_start_token_are_silent(layout, seed):
    toks = codec_like_tokens(seed=seed)
    assert judge_tapped_inputs(hf_inputs_trace(toks, "tokens.input", layout, valid_frames=[50, 50, 50, 30])) == []
    # Tapped as tokens.pattern: read as inputs, and said once as info.
    got = judge_tapped_inputs(hf_inputs_trace(toks, "tokens.pattern", layout))
    assert _ids(got) == [("tap.read_as", "info", "tokens.pattern")] and "docs/taps.md" in got[0].message


@pytest.mark.parametrize("layout", ["BKT", "BTK", "(BK)T"])
def test_inputs_equal_to_the_targets_are_the_model_seeing_its_answer(layout):
    f = judge_tapped_inputs(hf_inputs_trace(codec_like_tokens(), "tokens.input", layout, lag=0))
    assert _ids(f) == [("targets.misaligned", "error", "targets")]
    assert f[0].evidence["input_lag"] == 0 and f[0].evidence["same_position"] == 1.0
    assert f[0].evidence["codebooks"] == [0, 1, 2, 3]


def test_inputs_shifted_twice_predict_too_far_ahead():
    f = judge_tapped_inputs(hf_inputs_trace(codec_like_tokens(), "tokens.input", "(BK)T", lag=2))
    assert _ids(f) == [("targets.misaligned", "error", "targets")] and f[0].evidence["input_lag"] == 2
    assert "shifted 2 times" in f[0].message


def test_repetitive_codes_do_not_make_shifted_inputs_look_like_copies():
    toks = np.repeat(codec_like_tokens()[..., :10], 5, axis=-1)  # every code held for 5 frames
    assert judge_tapped_inputs(hf_inputs_trace(toks, "tokens.input")) == []
    assert _ids(judge_tapped_inputs(hf_inputs_trace(toks, "tokens.input", lag=0)))[0][0] == "targets.misaligned"


@pytest.mark.parametrize("seed", range(3))
def test_audiocraft_pattern_sequence_against_frame_time_targets(seed):
    toks = codec_like_tokens(seed=seed)
    assert judge_tapped_inputs(audiocraft_trace(toks)) == []
    assert judge_tapped_inputs(audiocraft_trace(toks, model_delay=[0, 1, 2, 3])) == []
    # The pattern itself fed to the model (no empty first step): codebook 0 reads its own target.
    leak = judge_tapped_inputs(audiocraft_trace(toks, sequence=pattern_sequence(toks, empty_first=False)))
    assert _ids(leak) == [("targets.misaligned", "error", "targets")] and leak[0].evidence["codebooks"] == [0]


def test_inputs_that_match_the_targets_nowhere_are_said_not_judged():
    toks = codec_like_tokens()
    other = np.random.default_rng(5).integers(0, 64, size=(4, 4, 54))
    f = judge_tapped_inputs(audiocraft_trace(toks, sequence=other))
    assert _ids(f) == [("tap.ambiguous", "info", "tokens.input")]
