"""Data checks on hand-made traces: each fires on its defect and stays silent on a clean one."""

import numpy as np
import pytest

from _traces import codec_like_tokens, make_trace, step_trace
from signalchain.checks.data import (
    check_batch_sizes,
    check_initial_loss,
    check_masks,
    check_shapes,
    check_targets,
)


def ids(findings):
    return [(f.id, f.stage) for f in findings]


@pytest.fixture
def tokens():
    return codec_like_tokens()


@pytest.mark.parametrize("seed", range(4))
def test_clean_traces_raise_nothing(seed):
    t = step_trace(codec_like_tokens(seed=seed))
    for check in (check_batch_sizes, check_shapes, check_initial_loss, check_masks, check_targets):
        assert check(t) == [], check.__name__


def test_batch_size_mismatch_names_the_odd_stage():
    t = make_trace(("audio.original", np.zeros((4, 1, 100), np.float32), {"sample_rate": 8000}),
                   ("caption", ["a", "b", "c", "d"]), ("metadata", [{"k": 1}] * 3))
    assert ids(check_batch_sizes(t)) == [("batch.size_mismatch", "metadata")]


def test_shape_mismatch_of_targets_and_mask(tokens):
    b, k, t = tokens.shape
    tr = make_trace(("targets", tokens[..., :-1]), ("logits", np.zeros((b, k, t, 8), np.float32)),
                    ("mask.loss", np.ones((b, 1, t), bool)))
    assert ("shape.mismatch", "targets") in ids(check_shapes(tr))
    tr2 = make_trace(("targets", tokens), ("logits", np.zeros((b, k, t, 8), np.float32)), ("mask.loss", np.ones((b, 1, t), bool)))
    assert ids(check_shapes(tr2)) == [("shape.mismatch", "mask.loss")]


def test_initial_loss_far_from_log_cardinality(tokens):
    assert ids(check_initial_loss(step_trace(tokens, loss=12.0))) == [("loss.initial", "loss")]
    assert ids(check_initial_loss(step_trace(tokens, loss=0.5))) == [("loss.initial", "loss")]
    assert check_initial_loss(step_trace(tokens, loss=float(np.log(64)) + 0.3)) == []


def test_empty_and_nearly_empty_masks(tokens):
    empty = np.zeros(tokens.shape, bool)
    f = check_masks(step_trace(tokens, mask=empty))
    assert ids(f) == [("mask.empty", "mask.loss")] and f[0].severity.value == "error"
    pad_empty = check_masks(step_trace(tokens, mask=empty, padding=np.zeros((4, 50), bool)))
    assert ids(pad_empty) == [("mask.empty", "mask.padding")]
    nearly = np.zeros(tokens.shape, bool)
    nearly[:, :, :1] = True
    f = check_masks(step_trace(tokens, mask=nearly))
    assert ids(f) == [("mask.empty", "mask.loss")] and f[0].severity.value == "warning"
    one_codebook = np.ones(tokens.shape, bool)
    one_codebook[:, 2] = False
    f = check_masks(step_trace(tokens, mask=one_codebook))
    assert f[0].id == "mask.empty" and f[0].evidence["per_codebook"][2] == 0


def test_padding_trained(tokens):
    padding = np.ones((4, 50), bool)
    padding[0, 30:] = False
    f = check_masks(step_trace(tokens, padding=padding))  # loss mask all True: 4 codebooks × 20 frames in padding
    assert ids(f) == [("mask.padding_trained", "mask.loss")] and f[0].evidence["positions"] == 80
    ok = np.ones(tokens.shape, bool)
    ok[0, :, 30:] = False
    assert check_masks(step_trace(tokens, mask=ok, padding=padding)) == []


def test_constant_targets(tokens):
    f = check_targets(step_trace(tokens, targets=np.zeros_like(tokens)))
    assert ids(f) == [("targets.constant", "targets")]


def test_random_targets(tokens):
    rnd = np.random.default_rng(1).integers(0, 64, size=tokens.shape)
    f = check_targets(step_trace(tokens, targets=rnd))
    assert ids(f) == [("targets.random", "targets")]
    assert f[0].evidence["temporal_mi"] < 0.05


def test_misaligned_targets_name_the_shift(tokens):
    shifted = np.roll(tokens, -1, axis=-1)  # targets[t] = tokens[t + 1]
    f = check_targets(step_trace(tokens, targets=shifted))
    assert ids(f) == [("targets.misaligned", "targets")]
    assert f[0].evidence["shift_per_codebook"] == [1, 1, 1, 1]
    one = tokens.copy()
    one[:, 3] = np.roll(tokens[:, 3], 1, axis=-1)  # one codebook delayed twice
    f = check_targets(step_trace(tokens, targets=one))
    assert ids(f) == [("targets.misaligned", "targets")] and f[0].evidence["shift_per_codebook"][3] == -1


def test_declared_shift_is_respected(tokens):
    shifted = np.roll(tokens, -1, axis=-1)
    t = make_trace(("tokens", tokens), ("targets", shifted, {"shift": 1}))
    assert check_targets(t) == []


def test_out_of_range_targets(tokens):
    bad = tokens.copy()
    bad[0, 0, 0] = 64
    t = step_trace(tokens, targets=bad)
    assert ("tokens.out_of_range", "targets") in ids(check_targets(t))


def test_without_tokens_random_targets_show_no_temporal_information():
    rnd = np.random.default_rng(2).integers(0, 64, size=(4, 4, 50))
    t = make_trace(("targets", rnd), ("logits", np.zeros((4, 4, 50, 64), np.float32)))
    assert ids(check_targets(t)) == [("targets.random", "targets")]
    t2 = make_trace(("targets", codec_like_tokens()), ("logits", np.zeros((4, 4, 50, 64), np.float32)))
    assert check_targets(t2) == []
