import numpy as np
import pytest

from signalchain.symbolic.vocab import Vocab, parse_beats, positions_per_bar, quarters_per_beat, walk

miditok = pytest.importorskip("miditok")

from _symbolic import encode, notes_table, token_meta, tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


@pytest.fixture(scope="module")
def vocab(tok):
    return Vocab.from_meta(token_meta(tok))


def test_parse_beats():
    assert parse_beats("1.2.8") == 1.25
    assert parse_beats("121.29") == pytest.approx(121.29)
    assert parse_beats("-1") == -1
    assert parse_beats("None") is None


def test_positions_per_bar_count_the_denominators_beat():
    assert positions_per_bar((4, 4), 4) == 16
    assert positions_per_bar((3, 4), 4) == 12
    assert positions_per_bar((6, 8), 4) == 24  # six eighth-note beats (miditok 3)
    assert quarters_per_beat((6, 8)) == 0.5


def test_vocab_reads_types_ranges_and_specials(tok, vocab):
    assert len(vocab) == len(tok.vocab)
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (tok.pad_token_id, tok["BOS_None"], tok["EOS_None"])
    assert vocab.resolution == max(tok.config.beat_res.values())
    assert vocab.attributes() == ("Velocity", "Duration")
    assert vocab.pitch_range() == tuple(tok.config.pitch_range)  # miditok 3's range is inclusive
    assert vocab.sorted_values("Duration")[-1] == max(b for _, b in tok.config.beat_res)  # the largest, in beats
    assert vocab.max_gap("Velocity") == pytest.approx(16, abs=1)
    assert (6, 8) in vocab.time_signatures().values()


def test_from_meta_refuses_what_is_not_a_flat_vocabulary():
    assert Vocab.from_meta({"vocab": [{"Pitch_60": 0}, {"Position_0": 0}]}) is None
    assert Vocab.from_meta({}) is None


@pytest.mark.parametrize("ts", [(4, 4), (3, 4), (6, 8)])
def test_walk_recovers_notes_in_quarter_notes(tok, vocab, ts):
    rows = notes_table([(0, 60, 0, 1, 80, 0, 0), (0, 64, 1.5, 0.5, 100, 40, 0), (0, 67, 3.25, 2, 60, 0, 0),
                        (0, 36, 6.5, 0.25, 100, 0, 1)])
    ev = walk(encode(tok, (rows, 100.0, ts)), vocab)
    got = sorted((p, round(o, 4), round(d, 4), prog, drum) for p, o, d, _, prog, drum in ev.notes)
    assert got == sorted([(60, 0.0, 1.0, 0, 0), (64, 1.5, 0.5, 40, 0), (67, 3.25, 2.0, 0, 0), (36, 6.5, 0.25, 0, 1)])
    assert ev.time_signatures[0] == ts and ev.bars >= 2 and len(ev.tempos) == 1
    assert not (ev.positions_past_bar or ev.missing_attributes or ev.pads_inside or ev.position_backwards)


def test_walk_reports_specials_out_of_place_and_unknown_types():
    v = Vocab.parse(["PAD_None", "BOS_None", "EOS_None", "Bar_None", "Position_0", "Pitch_60", "Velocity_64",
                     "Duration_1.0.8", "Chord_maj"])
    ev = walk([3, 4, 5, 6, 7, 0, 8, 1, 2, 2, 0], v)
    assert ev.pads_inside == [5] and ev.bos_misplaced == [7] and ev.eos_misplaced == [8, 9]
    assert ev.unknown_types == {"Chord"} and ev.length == 10
    left_padded = walk([0, 0, 1, 3, 4, 5, 6, 7, 2], v)
    assert left_padded.pads_inside == [] and left_padded.bos_misplaced == [] and len(left_padded.notes) == 1
    assert walk([3, 4, 5, 99, -1], v).out_of_range == [3, 4]


def test_pad_id_equal_to_eos_or_bos_is_padding_outside_the_sequence():
    """GPT-2's and parler-tts' convention (issue 41): `pad_token_id = eos_token_id` (and GPT-2's BOS too).
    Trailing ids equal to it are padding (the first of them the EOS), a leading one is BOS: no
    misplaced special; the same id inside the sequence is still a pad inside."""
    tokens = ["EOS_None", "Bar_None", "Position_0", "Pitch_60", "Velocity_64", "Duration_1.0.8"]
    v = Vocab.parse(tokens, pad_id=0, bos_id=0, eos_id=0)
    ev = walk([0, 1, 2, 3, 4, 5, 0, 0, 0], v)
    assert ev.bos_misplaced == [] and ev.eos_misplaced == [] and ev.pads_inside == [] and len(ev.notes) == 1
    assert walk([1, 2, 3, 0, 4, 5, 0], v).pads_inside == [3]
    separate = Vocab.parse(["PAD_None", *tokens])  # its own pad id: a repeated EOS is still misplaced
    assert walk([2, 3, 4, 5, 6, 1, 1, 0], separate).eos_misplaced == [5, 6]


def test_walk_finds_positions_past_the_bar_and_missing_attributes():
    v = Vocab.parse(["PAD_None", "Bar_None", "TimeSig_3/4", *(f"Position_{i}" for i in range(32)), "Pitch_60",
                     "Velocity_64", "Duration_1.0.8"], resolution=8)
    pos = {f"Position_{i}": 3 + i for i in range(32)}
    ev = walk([1, 2, pos["Position_30"], 35, 36, 37, pos["Position_2"], 35, 37], v)
    assert ev.positions_past_bar == [(2, 30, 24)]
    assert ev.missing_attributes == [(7, "Velocity")] and ev.position_backwards == 1
    assert np.isclose(ev.notes[0][1], 30 / 8)


@pytest.mark.parametrize("kind", ["REMI", "TSD"])
def test_a_bpe_tokenizers_model_ids_read_as_the_base_tokens_they_merge(kind, tmp_path):
    """Issue 41 (MidiTok#228): one string per model id (`model_vocab`), a merge read as its base tokens,
    so the structure of BPE ids is walked as the base sequence; the README's idiom raises for BPE."""
    from _symbolic import random_piece
    from signalchain.symbolic import model_vocab, to_score

    cfg = miditok.TokenizerConfig(special_tokens=["PAD", "BOS", "EOS"], use_programs=True)
    tok = getattr(miditok, kind)(cfg)
    rng = np.random.default_rng(0)
    files = []
    for i in range(6):
        rows, tempo, ts = random_piece(rng)
        f = tmp_path / f"{i}.mid"
        to_score(rows, tempo, ts).dump_midi(f)
        files.append(f)
    base = len(tok)
    tok.train(vocab_size=base + 60, model="BPE", files_paths=files)
    with pytest.raises(KeyError):
        [tok[i] for i in range(len(tok))]  # noqa: B018 - the idiom that fails for a trained tokenizer
    strings = model_vocab(tok)
    assert len(strings) == len(tok) and any(" " in s for s in strings)
    seq = tok.encode(to_score(*random_piece(rng)))
    seq = seq[0] if isinstance(seq, list) else seq
    assert max(seq.ids) >= base  # the piece uses merges
    v = Vocab.parse(strings, pad_id=tok.pad_token_id)
    expanded = v.expand(np.asarray([seq.ids]))[0]
    assert [v.tokens[i] for i in expanded] == list(seq.tokens)
    walked = walk(expanded, v)
    assert not walked.missing_attributes and not walked.unknown_types and walked.pitch_tokens > 0
