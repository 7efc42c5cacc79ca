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
