"""Symbolic token structure and emptiness, on traces made with a real miditok REMI tokenizer."""

import numpy as np
import pytest

pytest.importorskip("miditok")

from _symbolic import clean_pieces, make_trace_tokens, notes_table, symbolic_trace, tokenizer  # noqa: E402
from signalchain.checks.symbolic_structure import judge_empty, judge_structure  # noqa: E402

TOK = tokenizer()


def structure(trace):
    f = judge_structure(trace)
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("symbolic.structure", "error", "tokens")], f
    return f[0]


def test_clean_tokens_are_well_formed_with_bos_and_eos():
    assert judge_structure(symbolic_trace(clean_pieces(0), tok=TOK, bos_eos=True)) == []
    assert judge_empty(symbolic_trace(clean_pieces(0), tok=TOK)) == []


def test_bars_stripped():
    bar = TOK["Bar_None"]
    f = structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=lambda s: [[i for i in x if i != bar] for x in s]))
    assert f.evidence["token_type"] == "Bar" and f.evidence["problem"] == "no_bar"


def test_position_past_the_bar():
    def push(seqs):  # a 3/4 bar holds 24 positions at resolution 8: move the later ones past it
        p = {TOK[f"Position_{i}"]: TOK[f"Position_{i + 16}"] for i in range(8, 24)}
        return [[p.get(i, i) for i in x] for x in seqs]

    pieces = clean_pieces(0)
    f = structure(symbolic_trace([pieces[1]], tok=TOK, edit_ids=push))  # the 3/4 piece
    assert f.evidence["problem"] == "position_past_bar" and f.evidence["detail"]["position_past_bar"][
        "positions_per_bar"] == 24
    assert "Position" in f.message or "position" in f.message.lower()


def test_pad_inside_bos_late_eos_repeated_and_ids_out_of_range():
    pad, bos, eos = TOK.pad_token_id, TOK["BOS_None"], TOK["EOS_None"]
    cases = {
        "pad_inside": lambda s: [x[:10] + [pad, pad] + x[10:] for x in s],
        "bos_misplaced": lambda s: [x[:5] + [bos] + x[5:] for x in s],
        "eos_misplaced": lambda s: [x + [eos, eos] for x in s],
        "out_of_range": lambda s: [x[:7] + [len(TOK.vocab) + 3] + x[7:] for x in s],
    }
    for problem, edit in cases.items():
        f = structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=edit, decoded=False))
        assert problem in f.evidence["problems"], (problem, f.message)
    f = structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=cases["out_of_range"], decoded=False))
    assert f.evidence["detail"]["out_of_range"]["vocabulary"] == len(TOK.vocab) and "outside the vocabulary" in \
        f.message


def test_a_pitch_without_its_attributes():
    vel = {TOK[s] for s in TOK.vocab if s.startswith("Velocity_")}
    f = structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=lambda s: [[i for i in x if i not in vel]
                                                                                  for x in s], decoded=False))
    assert f.evidence["problem"] == "missing_attributes" and f.evidence["token_type"] == "Pitch"


def test_left_padding_and_a_crop_through_the_last_note_are_allowed():
    pad = TOK.pad_token_id
    assert judge_structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=lambda s: [[pad] * 3 + x[:-2]
                                                                                          for x in s])) == []


def test_octuple_like_or_unparsed_vocab_is_info_not_a_verdict():
    t = make_trace_tokens(np.zeros((2, 5, 3), np.int64), {"kind": "symbolic", "tokenizer": "Octuple",
                                                           "vocab": [["Pitch_60"], ["Position_0"]]})
    assert [(f.id, f.severity.value) for f in judge_structure(t)] == [("symbolic.not_judged", "info")]


def test_codec_tokens_are_not_judged():
    t = make_trace_tokens(np.zeros((2, 4, 5), np.int64), {"cardinality": 8})
    assert judge_structure(t) == [] and judge_empty(t) == []


def test_empty_window_is_blamed_on_the_source():
    pieces = clean_pieces(0)
    empty = (notes_table([]), 120.0, (4, 4))
    f = judge_empty(symbolic_trace([pieces[0], empty, pieces[2]], tok=TOK))
    assert [(x.id, x.stage) for x in f] == [("symbolic.empty", "midi.source")]
    assert f[0].evidence["examples"] == [1] and f[0].evidence["by_stage"]["tokens"] == [1]


def test_a_sequence_without_notes_is_blamed_on_the_tokens():
    pitches = {TOK[s] for s in TOK.vocab if s.startswith(("Pitch_", "PitchDrum_"))}
    f = judge_empty(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=lambda s: [
        [i for i in x if i not in pitches] if b == 2 else x for b, x in enumerate(s)]))
    assert [(x.id, x.stage, x.evidence["examples"]) for x in f] == [("symbolic.empty", "tokens", [2])]


@pytest.mark.parametrize("name", ["TSD", "MIDILike", "Structured"])
def test_other_flat_tokenizers_do_not_misfire(name):
    import miditok

    cfg = miditok.TokenizerConfig(use_tempos=True, use_time_signatures=True, use_programs=True,
                                  special_tokens=["PAD", "BOS", "EOS"])
    t = symbolic_trace(clean_pieces(0), tok=getattr(miditok, name)(cfg))
    assert judge_structure(t) == [] and judge_empty(t) == []


def test_durations_left_out_for_a_whole_program_are_the_tokenizers_choice_not_a_malformed_sequence():
    # miditok's `use_note_duration_programs` leaves Duration out for the programs not listed (drums
    # often): every note of that program lacks it, consistently, which is how the tokenizer writes.
    dur = {TOK[s] for s in TOK.vocab if s.startswith("Duration_")}
    assert judge_structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=lambda s: [[i for i in x if i not in dur]
                                                                                         for x in s],
                                          decoded=False)) == []


def test_a_duration_missing_on_some_notes_of_a_program_that_has_them_elsewhere_is_malformed():
    dur = {TOK[s] for s in TOK.vocab if s.startswith("Duration_")}

    def drop_every_other(seqs):
        out = []
        for x in seqs:
            seen, row = 0, []
            for i in x:
                if i in dur:
                    seen += 1
                    if seen % 2:
                        continue
                row.append(i)
            out.append(row)
        return out

    f = structure(symbolic_trace(clean_pieces(0), tok=TOK, edit_ids=drop_every_other, decoded=False))
    assert f.evidence["problem"] == "missing_attributes"
