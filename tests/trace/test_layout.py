"""Reading a step's layout from its taps: the reference's and Hugging Face's conventions."""

import numpy as np

from _traces import codec_like_tokens, hf_step_trace, step_trace
from signalchain.trace.layout import canonical_logits, infer_delays, read_layout


def test_the_reference_layout_is_frame_time_and_needs_no_change():
    toks = codec_like_tokens()
    v = read_layout(step_trace(toks))
    assert v.orders == {"logits": "BKTV", "targets": "BKT", "mask.loss": "BKT"}
    assert v.target_time == "frame" and v.ignore_index is None and v.problems == []
    assert np.array_equal(v.targets, toks) and v.padding_in_target_time.all()


def test_hf_labels_are_read_as_delayed_targets_with_an_ignore_index():
    toks = codec_like_tokens()
    v = read_layout(hf_step_trace(toks, valid_frames=[50, 50, 50, 30]))
    assert v.orders == {"logits": "(BK)TV", "targets": "BTK", "mask.loss": "BKT", "tokens.pattern": "BKT"}
    assert v.logits_shape == (4, 4, 53, 64) and v.targets.shape == (4, 4, 53)
    assert v.ignore_index == -100 and v.pattern_delays == [0, 1, 2, 3] and v.target_time == "pattern"
    # Codebook k of frame t sits at t + k; the padding mask follows it there.
    assert np.array_equal(v.targets[:3, 2, 2:52], toks[:3, 2]) and (v.targets[3, 2, 32:] == -100).all()
    assert not v.padding_in_target_time[3, 1, 31] and v.padding_in_target_time[3, 1, 30]
    assert not (v.mask & ~v.padding_in_target_time).any()


def test_delays_are_inferred_from_values_and_a_delay_meta_wins():
    toks = codec_like_tokens()
    pattern = read_layout(hf_step_trace(toks)).targets
    d, agree = infer_delays(toks, pattern, pattern >= 0)
    assert d == [0, 1, 2, 3] and min(agree) == 1.0


def test_canonical_logits_from_every_layout():
    x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(2, 3, 5, 7)
    assert np.array_equal(canonical_logits(x.reshape(6, 5, 7), 2, 3), x)
    assert np.array_equal(canonical_logits(np.swapaxes(x, 1, 2), 2, 3), x)
    assert canonical_logits(x.reshape(30, 7), 2, 3) is None


# ---- decoder inputs: what the model reads, tapped as tokens.input or as tokens.pattern ----------

import pytest  # noqa: E402

from _decoder_inputs import audiocraft_trace, hf_inputs_trace, pattern_sequence  # noqa: E402
from signalchain.trace.shifts import confident_delays, ids_to_bkt  # noqa: E402


@pytest.mark.parametrize("layout", ["BKT", "BTK", "(BK)T"])
def test_hf_decoder_inputs_tapped_as_pattern_are_read_as_inputs(layout):
    toks = codec_like_tokens(seed=1)
    v = read_layout(hf_inputs_trace(toks, "tokens.pattern", layout, valid_frames=[50, 50, 50, 30]))
    assert v.pattern_role == "input" and v.input_stage == "tokens.pattern" and v.orders["tokens.pattern"] == layout
    assert v.inputs.shape == (4, 4, 53) and (v.inputs[:, :, 0] == 64).all()
    # Not a pattern: its delays ([1, 2, 3, 4] against the frames) are not the pipeline's. The targets' own are.
    assert v.pattern_delays is None and v.target_delays == [0, 1, 2, 3] and v.padding_delays == [0, 1, 2, 3]
    assert v.input_delays == [1, 2, 3, 4] and v.training_delays == [0, 1, 2, 3]
    assert not (v.mask & ~v.padding_in_target_time).any()
    assert v.notes and "read as tokens.input" in v.notes[0]


def test_a_pattern_and_inputs_tapped_side_by_side_keep_their_names():
    v = read_layout(hf_inputs_trace(codec_like_tokens(), "tokens.input", "(BK)T", keep_pattern=True))
    assert v.pattern_role == "pattern" and v.pattern_delays == [0, 1, 2, 3]
    assert v.input_stage == "tokens.input" and v.orders["tokens.input"] == "(BK)T" and v.notes == []


def test_unshifted_inputs_tapped_as_pattern_are_a_pattern():
    # decoder_input_ids = labels looks exactly like the delayed codes: only the embedding probe, or a
    # tokens.input tap, can tell them apart. The layout reads the correct meaning.
    v = read_layout(hf_inputs_trace(codec_like_tokens(), "tokens.pattern", lag=0))
    assert v.pattern_role == "pattern" and v.inputs is None and v.pattern_delays == [0, 1, 2, 3]


def test_audiocraft_pattern_sequence_is_read_as_inputs_against_frame_time_targets():
    toks = codec_like_tokens(seed=2)
    v = read_layout(audiocraft_trace(toks, "tokens.pattern"))
    assert v.target_time == "frame" and v.pattern_role == "input" and v.input_delays == [1, 2, 3, 4]
    assert v.training_delays == [0, 1, 2, 3]
    # Without its empty first step it is AudioCraft's pattern itself.
    v = read_layout(audiocraft_trace(toks, "tokens.pattern", sequence=pattern_sequence(toks, empty_first=False)))
    assert v.pattern_role == "pattern" and v.pattern_delays == [0, 1, 2, 3] and v.inputs is None
    # What the step declares settles it either way.
    seq = pattern_sequence(toks, delays=[1, 2, 3, 4], empty_first=False)  # a pattern that starts at delay 1
    v = read_layout(audiocraft_trace(toks, "tokens.pattern", sequence=seq, delay=[1, 2, 3, 4]))
    assert v.pattern_role == "pattern" and v.pattern_delays == [1, 2, 3, 4]


def test_codes_that_repeat_at_every_shift_give_no_delays():
    silence = np.full((4, 4, 50), 7, dtype=np.int64)
    assert confident_delays(silence, pattern_sequence(silence, empty_first=False)) is None
    v = read_layout(hf_inputs_trace(codec_like_tokens(), "tokens.pattern"))
    assert v.target_delays == [0, 1, 2, 3]


def test_ids_in_each_of_hfs_layouts():
    x = np.arange(2 * 3 * 5).reshape(2, 3, 5)
    for arr, order in ((x, "BKT"), (x.transpose(0, 2, 1), "BTK"), (x.reshape(6, 5), "(BK)T")):
        got, o = ids_to_bkt(arr, 2, 3, 5)
        assert o == order and np.array_equal(got, x)
    square = np.arange(2 * 3 * 3).reshape(2, 3, 3)  # K == T: the targets' time cannot tell; [B, K, T] is read
    assert ids_to_bkt(square, 2, 3, 3)[1] == "BKT"
    assert ids_to_bkt(x.reshape(30), 2, 3, 5) is None and ids_to_bkt(x.reshape(5, 6), 2, 3, 5) is None
