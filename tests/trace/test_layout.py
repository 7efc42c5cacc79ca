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
    assert v.orders == {"logits": "(BK)TV", "targets": "BTK", "mask.loss": "BKT"}
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
