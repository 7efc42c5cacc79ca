import numpy as np

from _traces import codec_like_tokens, make_trace
from signalchain.checks.tokens import judge_crop, judge_tokens


def crop_trace(bounds, lengths, total=32000):
    mono = np.zeros((len(lengths), 1, total), np.float32)
    return make_trace(("audio.mono", mono, {"sample_rate": 16000, "lengths": lengths}),
                      ("crop", np.array(bounds), {"sample_rate": 16000, "lengths": lengths}))


def test_crops_inside_clips_are_fine():
    assert judge_crop(crop_trace([[0, 16000], [10000, 26000], [0, 16000]], [20000, 30000, 9000])) == []


def test_crop_in_padding():
    f = judge_crop(crop_trace([[0, 16000], [16000, 32000]], [20000, 12000]))
    assert [(x.id, x.stage) for x in f] == [("crop.in_padding", "crop")]
    assert f[0].evidence["examples"] == [1]


def test_crop_out_of_bounds():
    f = judge_crop(crop_trace([[-100, 15900], [0, 16000]], [20000, 20000]))
    assert "crop.out_of_bounds" in [x.id for x in f]


def test_token_range_and_silence_dominance():
    toks = codec_like_tokens(card=64)
    assert judge_tokens(make_trace(("tokens", toks, {"cardinality": 64}))) == []
    bad = toks.copy()
    bad[0, 0, 0] = 70
    assert [x.id for x in judge_tokens(make_trace(("tokens", bad, {"cardinality": 64})))] == ["tokens.out_of_range"]
    silent = toks.copy()
    silent[:3] = 0  # three of four examples are the all-zero pattern
    f = judge_tokens(make_trace(("tokens", silent, {"cardinality": 64})))
    assert [(x.id, x.stage) for x in f] == [("tokens.silence_dominant", "tokens")]
    assert f[0].evidence["pattern"] == [0, 0, 0, 0]


def test_silence_in_padding_frames_does_not_count():
    toks = codec_like_tokens(card=64)
    toks[:, :, 10:] = 0
    padding = np.zeros((4, 50), bool)
    padding[:, :10] = True
    assert judge_tokens(make_trace(("tokens", toks, {"cardinality": 64}), ("mask.padding", padding))) == []


def test_a_delay_pattern_tapped_as_tokens_is_read_as_one_not_out_of_range():
    from _decoder_inputs import pattern_sequence

    codes = codec_like_tokens()
    for first in (1, 0):  # AudioCraft's sequence (an empty first step), and the pattern itself
        tapped = pattern_sequence(codes, empty_first=bool(first))
        f = judge_tokens(make_trace(("tokens", tapped, {"cardinality": 64})))
        assert [(x.id, x.severity.value) for x in f] == [("tap.read_as", "info")]
        assert f[0].evidence["pad_id"] == 64
        assert f[0].evidence["head"] == [k + first for k in range(4)] and f[0].evidence["tail"] == [3, 2, 1, 0]
    # The pad id inside one example's codes (a clip padded with it) is out of range.
    leaked = codes.copy()
    leaked[2, :, 30:] = 64
    assert [x.id for x in judge_tokens(make_trace(("tokens", leaked, {"cardinality": 64})))] == ["tokens.out_of_range"]
    every = codes.copy()
    every[:, :, 40:] = 64  # every clip padded with it at the end: codes, not a pattern's edges
    assert [x.id for x in judge_tokens(make_trace(("tokens", every, {"cardinality": 64})))] == ["tokens.out_of_range"]
