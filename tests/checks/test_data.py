"""Data checks on hand-made traces: each fires on its defect and stays silent on a clean one."""

import numpy as np
import pytest

from _traces import codec_like_tokens, make_trace, step_trace
from signalchain.checks.data import (
    judge_batch_sizes,
    judge_initial_loss,
    judge_masks,
    judge_shapes,
    judge_targets,
)


def ids(findings):
    return [(f.id, f.stage) for f in findings]


@pytest.fixture
def tokens():
    return codec_like_tokens()


@pytest.mark.parametrize("seed", range(4))
def test_clean_traces_raise_nothing(seed):
    t = step_trace(codec_like_tokens(seed=seed))
    for check in (judge_batch_sizes, judge_shapes, judge_initial_loss, judge_masks, judge_targets):
        assert check(t) == [], check.__name__


def test_batch_size_mismatch_names_the_odd_stage():
    t = make_trace(("audio.original", np.zeros((4, 1, 100), np.float32), {"sample_rate": 8000}),
                   ("caption", ["a", "b", "c", "d"]), ("metadata", [{"k": 1}] * 3))
    assert ids(judge_batch_sizes(t)) == [("batch.size_mismatch", "metadata")]


def test_shape_mismatch_of_targets_and_mask(tokens):
    b, k, t = tokens.shape
    tr = make_trace(("targets", tokens[..., :-1]), ("logits", np.zeros((b, k, t, 8), np.float32)),
                    ("mask.loss", np.ones((b, 1, t), bool)))
    assert ("shape.mismatch", "targets") in ids(judge_shapes(tr))
    tr2 = make_trace(
        ("targets", tokens), ("logits", np.zeros((b, k, t, 8), np.float32)), ("mask.loss", np.ones((b, 1, t), bool))
    )
    assert ids(judge_shapes(tr2)) == [("shape.mismatch", "mask.loss")]


@pytest.mark.parametrize("logits,targets", [((4, 16), (4,)), ((12, 16), (12,)), ((4, 16, 7), (4, 7))],
                         ids=["one-target-per-window", "flattened", "classes-second"])
def test_shapes_a_cross_entropy_takes_as_they_are_are_no_mismatch(logits, targets):
    """Issue 41: a model with one target per window ([B] targets, [B, V] logits), flattened [N, V] / [N],
    and torch's classes-second [N, V, T] / [N, T] fit `cross_entropy` as they are: info, never an error."""
    rng = np.random.default_rng(0)
    tr = make_trace(("targets", rng.integers(0, 16, targets)), ("logits", np.zeros(logits, np.float32)))
    found = judge_shapes(tr)
    assert [(f.id, f.severity.value) for f in found] == [("shape.unframed", "info")]


def test_shapes_no_cross_entropy_takes_are_still_a_mismatch():
    rng = np.random.default_rng(0)
    tr = make_trace(("targets", rng.integers(0, 16, (4, 3))), ("logits", np.zeros((4, 16), np.float32)))
    assert [(f.id, f.severity.value) for f in judge_shapes(tr)] == [("shape.mismatch", "error")]


def test_initial_loss_far_from_log_cardinality(tokens):
    above = judge_initial_loss(step_trace(tokens, loss=12.0))
    assert ids(above) == [("loss.initial", "loss")] and above[0].severity.value == "warning"
    # Below ln(V) is what a pretrained start looks like: context, never a warning on its own.
    below = judge_initial_loss(step_trace(tokens, loss=0.5))
    assert ids(below) == [("loss.initial", "loss")] and below[0].severity.value == "info"
    assert "pretrained start" in below[0].message and "0.500" in below[0].message
    assert judge_initial_loss(step_trace(tokens, loss=float(np.log(64)) + 0.3)) == []


def test_empty_and_nearly_empty_masks(tokens):
    empty = np.zeros(tokens.shape, bool)
    f = judge_masks(step_trace(tokens, mask=empty))
    assert ids(f) == [("mask.empty", "mask.loss")] and f[0].severity.value == "error"
    pad_empty = judge_masks(step_trace(tokens, mask=empty, padding=np.zeros((4, 50), bool)))
    assert ids(pad_empty) == [("mask.empty", "mask.padding")]
    nearly = np.zeros(tokens.shape, bool)
    nearly[:, :, :1] = True
    f = judge_masks(step_trace(tokens, mask=nearly))
    assert ids(f) == [("mask.empty", "mask.loss")] and f[0].severity.value == "warning"
    one_codebook = np.ones(tokens.shape, bool)
    one_codebook[:, 2] = False
    f = judge_masks(step_trace(tokens, mask=one_codebook))
    assert f[0].id == "mask.empty" and f[0].evidence["per_codebook"][2] == 0


def test_padding_trained(tokens):
    padding = np.ones((4, 50), bool)
    padding[0, 30:] = False
    f = judge_masks(step_trace(tokens, padding=padding))  # loss mask all True: 4 codebooks × 20 frames in padding
    assert ids(f) == [("mask.padding_trained", "mask.loss")] and f[0].evidence["positions"] == 80
    ok = np.ones(tokens.shape, bool)
    ok[0, :, 30:] = False
    assert judge_masks(step_trace(tokens, mask=ok, padding=padding)) == []


def test_constant_targets(tokens):
    f = judge_targets(step_trace(tokens, targets=np.zeros_like(tokens)))
    assert ids(f) == [("targets.constant", "targets")]


def test_random_targets(tokens):
    rnd = np.random.default_rng(1).integers(0, 64, size=tokens.shape)
    f = judge_targets(step_trace(tokens, targets=rnd))
    assert ids(f) == [("targets.random", "targets")]
    assert f[0].evidence["temporal_mi"] < 0.05


def test_misaligned_targets_name_the_shift(tokens):
    shifted = np.roll(tokens, -1, axis=-1)  # targets[t] = tokens[t + 1]
    f = judge_targets(step_trace(tokens, targets=shifted))
    assert ids(f) == [("targets.misaligned", "targets")]
    assert f[0].evidence["shift_per_codebook"] == [1, 1, 1, 1]
    # Beside a delay pattern (logits reverted to the codes' time, as AudioCraft's), one step ahead is
    # an off-by-one even where every target matches.
    ahead = tokens.copy()
    ahead[..., :-1] = tokens[..., 1:]
    mask = np.ones(tokens.shape, bool)
    mask[..., -1] = False
    pattern = np.full((4, 4, 53), 64)
    for k in range(4):
        pattern[:, k, k : k + 50] = tokens[:, k]
    f = judge_targets(step_trace(tokens, targets=ahead, mask=mask, **{"tokens.pattern": pattern}))
    assert ids(f) == [("targets.misaligned", "targets")]
    # With nothing tapped that says what the model reads, the next-token convention may be meant: info.
    f = judge_targets(step_trace(tokens, targets=ahead, mask=mask))
    assert [(x.id, x.severity.value) for x in f] == [("tap.ambiguous", "info")]
    one = tokens.copy()
    one[:, 3] = np.roll(tokens[:, 3], 1, axis=-1)  # one codebook delayed twice
    f = judge_targets(step_trace(tokens, targets=one))
    assert ids(f) == [("targets.misaligned", "targets")] and f[0].evidence["shift_per_codebook"][3] == -1


def test_declared_shift_is_respected(tokens):
    shifted = np.roll(tokens, -1, axis=-1)
    t = make_trace(("tokens", tokens), ("targets", shifted, {"shift": 1}))
    assert judge_targets(t) == []


def test_out_of_range_targets(tokens):
    bad = tokens.copy()
    bad[0, 0, 0] = 64
    t = step_trace(tokens, targets=bad)
    assert ("tokens.out_of_range", "targets") in ids(judge_targets(t))


def test_without_tokens_random_targets_show_no_temporal_information():
    rnd = np.random.default_rng(2).integers(0, 64, size=(4, 4, 50))
    t = make_trace(("targets", rnd), ("logits", np.zeros((4, 4, 50, 64), np.float32)))
    assert ids(judge_targets(t)) == [("targets.random", "targets")]
    t2 = make_trace(("targets", codec_like_tokens()), ("logits", np.zeros((4, 4, 50, 64), np.float32)))
    assert judge_targets(t2) == []


# ---- Hugging Face's conventions: labels [B, T', K] with -100, delayed time, logits [B*K, T', V] ----

from _traces import hf_step_trace  # noqa: E402
from signalchain.checks.data import DATA_CHECKS  # noqa: E402


def _all(trace):
    return [f for check in DATA_CHECKS for f in check(trace) if f.severity.value != "info"]


@pytest.mark.parametrize("seed", range(4))
def test_a_clean_hf_step_raises_nothing(seed):
    toks = codec_like_tokens(seed=seed)
    assert _all(hf_step_trace(toks, valid_frames=[50, 50, 50, 30])) == []
    # Without the pattern tap the delays cannot be told: nothing is called misaligned either.
    assert _all(hf_step_trace(toks, valid_frames=[50, 50, 50, 30], tap_pattern=False)) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_pattern_built_for_other_delays_than_the_models_is_misaligned(seed):
    toks = codec_like_tokens(seed=seed)
    # Labels and pattern agree with each other (a stereo formula, delay k // 2), but the model
    # declares that it generates with one delay per codebook: three codebooks train off-position.
    found = judge_targets(hf_step_trace(toks, delays=[0, 0, 1, 1], model_delay=[0, 1, 2, 3]))
    hit = [f for f in found if f.id == "targets.misaligned"]
    assert len(hit) == 1 and hit[0].stage == "targets" and hit[0].evidence["codebooks"] == [1, 2, 3]
    # The same declaration beside a pattern that matches it is silent, and so is a stereo pattern
    # whose model says it uses shared delays.
    assert _all(hf_step_trace(toks, model_delay=[0, 1, 2, 3])) == []
    assert _all(hf_step_trace(toks, delays=[0, 0, 1, 1], model_delay=[0, 0, 1, 1])) == []


def test_hf_padding_left_in_the_labels_is_padding_trained(tokens):
    def unmask_padding(labels):  # the collator pads with the codes of silence instead of -100
        out = labels.copy()
        out[3, 40:, :] = np.where(out[3, 40:, :] == -100, 0, out[3, 40:, :])
        return out

    found = ids(_all(hf_step_trace(tokens, valid_frames=[50, 50, 50, 30], labels_edit=unmask_padding)))
    assert ("mask.padding_trained", "mask.loss") in found


def test_hf_pad_id_counted_by_the_loss_is_out_of_range(tokens):
    def keep_pad(labels):  # the delay pattern's pad id (64) left where the loss counts it
        return np.where(labels == -100, 64, labels)

    f = judge_targets(hf_step_trace(tokens, labels_edit=keep_pad))
    assert ("tokens.out_of_range", "targets") in ids(f)
    # Where the loss mask excludes them, -100 (or any negative id) is the ignore index, not a bug.
    assert ("tokens.out_of_range", "targets") not in ids(judge_targets(hf_step_trace(tokens)))


def test_hf_labels_off_the_pipelines_own_delays_are_misaligned(tokens):
    # The pattern the pipeline built delays codebook k by k; labels delayed by 2k do not fit it.
    trace = make_trace(*[(r.name, r.value, r.meta) for r in hf_step_trace(tokens)
                         if r.name not in ("targets", "mask.loss", "logits")],
                       *[(r.name, r.value, r.meta) for r in hf_step_trace(tokens, delays=[0, 2, 4, 6])
                         if r.name in ("targets", "mask.loss")],
                       ("logits", np.zeros((16, 56, 64), np.float32)))
    found = judge_targets(trace)
    assert ids(found) == [("targets.misaligned", "targets")]
    assert found[0].evidence["delays"] == [0, 2, 4, 6] and found[0].evidence["pattern_delays"] == [0, 1, 2, 3]


def test_hf_shapes_are_read_in_their_own_layout(tokens):
    assert judge_shapes(hf_step_trace(tokens)) == []

    def short(labels):  # one delayed step lost: [B, T' - 1, K] against logits over T'
        return labels[:, :-1]

    assert ("shape.mismatch", "targets") in ids(judge_shapes(hf_step_trace(tokens, labels_edit=short,
                                                                           mask_from_labels=False)))


def test_every_label_ignored_is_an_empty_mask(tokens):
    f = judge_masks(hf_step_trace(tokens, labels_edit=lambda lab: np.full_like(lab, -100)))
    assert ids(f) == [("mask.empty", "mask.loss")] and f[0].severity.value == "error"


# ---- decoder inputs tapped (docs/taps.md): read as inputs, never as misalignment -------------------

from _decoder_inputs import audiocraft_trace, hf_inputs_trace, pattern_sequence  # noqa: E402
from signalchain.checks.tokens import TOKEN_CHECKS  # noqa: E402


@pytest.mark.parametrize("tap_as", ["tokens.input", "tokens.pattern"])
@pytest.mark.parametrize("layout", ["BKT", "BTK", "(BK)T"])
@pytest.mark.parametrize("seed", range(3))
def test_hf_decoder_inputs_tapped_raise_nothing(tap_as, layout, seed):
    toks = codec_like_tokens(seed=seed)
    for valid in (None, [50, 50, 50, 30], [50, 44, 50, 12]):
        assert _all(hf_inputs_trace(toks, tap_as, layout, valid_frames=valid)) == [], (valid,)
        # ... and with the model's own delays declared beside them.
        assert _all(hf_inputs_trace(toks, tap_as, layout, valid_frames=valid, model_delay=[0, 1, 2, 3])) == []


def test_unshifted_decoder_inputs_tapped_as_inputs_are_misaligned():
    toks = codec_like_tokens()
    for layout in ("BKT", "BTK", "(BK)T"):
        assert ids(_all(hf_inputs_trace(toks, "tokens.input", layout, lag=0))) == [("targets.misaligned", "targets")]
    # Under tokens.pattern the unshifted inputs are the delayed codes, value for value: a pattern. The
    # embedding probe (judge_target_leak, the data family's model_inputs step) sees them enter the model.
    assert _all(hf_inputs_trace(toks, "tokens.pattern", lag=0)) == []


def test_padding_in_hf_inputs_tapped_as_pattern_is_still_padding_trained():
    def unmask_padding(labels):
        out = labels.copy()
        out[3, 40:, :] = np.where(out[3, 40:, :] == -100, 0, out[3, 40:, :])
        return out

    toks = codec_like_tokens()
    base = hf_step_trace(toks, valid_frames=[50, 50, 50, 30], labels_edit=unmask_padding, tap_pattern=False)
    stages = [(r.name, r.value, dict(r.meta)) for r in base]
    from _decoder_inputs import shifted

    stages.insert(2, ("tokens.pattern", shifted(np.asarray(base.value("targets")))))
    assert ("mask.padding_trained", "mask.loss") in ids(_all(make_trace(*stages)))


@pytest.mark.parametrize("seed", range(3))
def test_frame_time_targets_with_an_audiocraft_sequence_and_the_models_delays(seed):
    toks = codec_like_tokens(seed=seed)
    for tap_as in ("tokens.input", "tokens.pattern"):
        for valid in (None, [50, 50, 50, 30]):  # short clips: codes set to the special id, a [B, K, T] padding mask
            assert _all(audiocraft_trace(toks, tap_as, valid_frames=valid, model_delay=[0, 1, 2, 3])) == []
            assert _all(audiocraft_trace(toks, tap_as, valid_frames=valid)) == []
            got = [f.id for f in TOKEN_CHECKS[1](audiocraft_trace(toks, tap_as, valid_frames=valid))]
            assert got == [], got  # the special id on padded frames is not a code out of range
    # A real pattern whose delays are not the model's is still misaligned in frame time.
    wrong = pattern_sequence(toks, delays=[0, 0, 1, 1], empty_first=False)
    found = judge_targets(audiocraft_trace(toks, "tokens.pattern", sequence=wrong, model_delay=[0, 1, 2, 3]))
    assert ids(found) == [("targets.misaligned", "targets")] and found[0].evidence["codebooks"] == [1, 2, 3]


@pytest.mark.parametrize("seed", range(3))
def test_the_plain_and_symbolic_loops_of_docs_taps_are_silent(seed):
    toks = codec_like_tokens(seed=seed)
    start = np.full(toks.shape[:2] + (1,), 64)
    plain = step_trace(toks, **{"tokens.input": np.concatenate([start, toks[..., :-1]], axis=-1)})
    assert _all(plain) == []
    assert ids(_all(step_trace(toks, **{"tokens.input": toks}))) == [("targets.misaligned", "targets")]
    rng = np.random.default_rng(seed)
    sym = rng.integers(3, 40, size=(4, 30))
    targets = np.full_like(sym, -100)
    targets[:, :-1] = sym[:, 1:]
    for meta in ({"ignore_index": -100, "shift": 1}, {"ignore_index": -100}):
        t = make_trace(("tokens", sym, {"kind": "symbolic", "cardinality": 40}), ("tokens.input", sym),
                       ("targets", targets, meta), ("mask.loss", targets != -100),
                       ("logits", np.zeros((4, 30, 40), np.float32)))
        assert _all(t) == [] and [f for f in DATA_CHECKS[-1](t)] == []


def test_a_padding_mask_built_from_the_padded_length_is_named_at_mask_padding():
    """Issue 41 (WhisperSpeech#19's bug): 8 clips cropped to 32 000 samples, the last one 19 200 long, at 320
    samples per frame; a mask marking all 100 frames of it real counts 40 padded frames; one marking 60 is right."""
    b, frames, hop = 8, 100, 320
    lengths = [32000] * (b - 1) + [19200]
    audio = np.zeros((b, 1, frames * hop), np.float32)
    for i, n in enumerate(lengths):
        audio[i, 0, :n] = 0.1
    right = np.ones((b, frames), bool)
    right[-1, 60:] = False

    def judged(padding):
        t = make_trace(("audio.cropped", audio, {"sample_rate": 32000, "lengths": lengths}),
                       ("mask.padding", padding))
        from signalchain.checks.data import _padding_against_lengths
        return [(f.id, f.severity.value, f.stage) for f in _padding_against_lengths(t, padding)]

    assert judged(np.ones((b, frames), bool)) == [("mask.padding_trained", "error", "mask.padding")]
    assert judged(right) == []
    one_more = right.copy()
    one_more[-1, 60] = True  # a codec's last partial frame: within one frame is not padding trained
    assert judged(one_more) == []
