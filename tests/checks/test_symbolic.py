"""The symbolic round trip, on traces made with a real miditok REMI tokenizer."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("miditok")

from _symbolic import clean_pieces, notes_table, random_piece, symbolic_trace, tokenizer  # noqa: E402
from signalchain.checks.symbolic import SYMBOLIC_CHECKS, judge_round_trip  # noqa: E402


def all_findings(trace):
    return [f for judge in SYMBOLIC_CHECKS for f in judge(trace)]


def one(findings, id="symbolic.round_trip"):
    got = [f for f in findings if f.id == id]
    assert len(got) == 1, [(f.id, f.message) for f in findings]
    return got[0]


def remap(tok, typ, fn):
    """An id edit: each id of token type `typ` replaced by the id of the token fn(value) names, if there is one."""
    inv = {i: s for s, i in tok.vocab.items()}

    def new_id(i):
        typ_, _, value = inv[i].partition("_")
        return tok.vocab.get(fn(value), i) if typ_ == typ else i

    return lambda seqs: [[new_id(i) for i in seq] for seq in seqs]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_round_trip_is_silent(seed):
    assert all_findings(symbolic_trace(clean_pieces(seed))) == []


def test_tolerates_the_tokenizers_own_losses():
    rows = notes_table([(0, 60, 0, 1, 80, 0, 0), (0, 60, 0, 1, 80, 0, 0),  # a duplicate: merged
                        (0, 62, 1, 0.01, 80, 0, 0),  # shorter than a position
                        (0, 64, 2, 40.0, 80, 0, 0),  # longer than the largest Duration token: clipped
                        *[(0, 50 + i, 0.5 * i, 0.5, 90, 0, 0) for i in range(20)]])
    assert judge_round_trip(symbolic_trace([(rows, 300.0, (4, 4))])) == []  # 300 bpm: beyond the Tempo bins


def test_silent_without_symbolic_tokens_or_notes():
    t = symbolic_trace(clean_pieces(0), decoded=False)
    assert judge_round_trip(t) == []


@pytest.mark.parametrize("fault, token_type, hint", [
    ({"tok": {"tempos": False}}, "Tempo", "without use_tempos"),
    ({"tok": {"time_signatures": False}}, "TimeSig", "without use_time_signatures"),
    ({"tok": {"programs": False}}, "Program", "without use_programs"),
    ({"tok": {"num_velocities": 1}}, "Velocity", "num_velocities=1"),
    ({"tok": {"pitch_range": (48, 72)}}, "Pitch", "pitch range"),
])
def test_a_tokenizer_that_drops_information_is_named(fault, token_type, hint):
    f = one(judge_round_trip(symbolic_trace(clean_pieces(0), tok=tokenizer(**fault["tok"]))))
    assert (f.severity.value, f.stage, f.evidence["token_type"]) == ("error", "tokens", token_type)
    assert hint in f.hint and f.evidence["counts"][token_type] > 0


def test_a_vocabulary_swap_is_named():
    a, b = tokenizer(), tokenizer(num_velocities=32)  # the cache made with a, training reads with b
    f = one(judge_round_trip(symbolic_trace(clean_pieces(0), tok=a, decoder=b)))
    assert f.evidence["vocabulary_mismatch"] is True and len(f.evidence["token_types"]) >= 2
    assert "vocabulary at training differs" in f.hint


def test_positions_and_durations_moved_by_the_ids_are_named():
    tok = tokenizer()
    later = remap(tok, "Position", lambda v: f"Position_{int(v) + 3}")
    moved = symbolic_trace(clean_pieces(0), tok=tok, edit_ids=later)
    assert one(judge_round_trip(moved)).evidence["token_type"] == "Position"
    durs = sorted(s for s in tok.vocab if s.startswith("Duration_"))

    def longer(v):  # four bins longer
        order = sorted(durs, key=lambda s: [int(x) for x in s.split("_")[1].split(".")])
        i = order.index(f"Duration_{v}")
        return order[min(i + 4, len(order) - 1)]

    stretched = symbolic_trace(clean_pieces(0), tok=tok, edit_ids=remap(tok, "Duration", longer))
    f = one(judge_round_trip(stretched))
    assert f.evidence["token_type"] == "Duration" and "Duration" in f.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), ts=st.sampled_from([(4, 4), (3, 4), (6, 8), (2, 4)]),
       tempo=st.floats(45, 240), drums=st.booleans(), programs=st.sampled_from([(0,), (0, 40), (33, 0, 56)]))
def test_clean_round_trip_is_silent_for_random_pieces(seed, ts, tempo, drums, programs):
    piece = random_piece(np.random.default_rng(seed), ts, tempo, programs, drums, bars=3)
    assert judge_round_trip(symbolic_trace([piece, clean_pieces(seed % 7, 1)[0]], tok=_TOK)) == []


note = st.tuples(st.booleans(), st.integers(21, 108), st.floats(0, 16), st.one_of(st.floats(0, 0.2), st.floats(0, 3),
                                                                                   st.floats(0, 20)),
                 st.integers(1, 127), st.sampled_from([0, 5, 40, 73]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notes=st.lists(note, min_size=1, max_size=60), ts=st.sampled_from([(4, 4), (3, 4), (6, 8), (5, 4), (12, 8)]),
       tempo=st.floats(30, 300))
def test_clean_round_trip_is_silent_for_any_notes(notes, ts, tempo):
    """Off-grid onsets, grace notes, overlaps at one pitch, chords across tracks, drums in any program."""
    rows = [(0, min(max(p, 27), 88) if drum else p, on, dur, vel, prog, int(drum))
            for drum, p, on, dur, vel, prog in notes]
    assert judge_round_trip(symbolic_trace([(notes_table(rows), tempo, ts)], tok=_TOK)) == []


_TOK = tokenizer()


def test_rows_cut_by_the_sequence_length_are_not_lost_notes():
    t = symbolic_trace(clean_pieces(0), tok=_TOK, edit_ids=lambda s: [x[:60] for x in s])
    assert judge_round_trip(t) == []
    lost = symbolic_trace(clean_pieces(0), tok=_TOK, bos_eos=True,  # an EOS says the row was not cut
                          edit_ids=lambda s: [x[:60] + [x[-1]] for x in s])
    assert one(judge_round_trip(lost)).evidence["token_type"] == "Position"


def test_a_program_the_tokenizer_does_not_list_is_named():
    import miditok

    cfg = miditok.TokenizerConfig(use_tempos=True, use_time_signatures=True, use_programs=True, num_velocities=8,
                                  special_tokens=["PAD", "BOS", "EOS"], programs=[-1, 0, 24, 33])
    f = one(judge_round_trip(symbolic_trace(clean_pieces(0), tok=miditok.REMI(cfg))))  # 40 and 56 are dropped
    assert f.evidence["token_type"] == "Program" and "programs list" in f.hint


_TOKENIZERS = {"default": _TOK, "16 velocities": tokenizer(num_velocities=16),
               "beat_res 4": tokenizer(beat_res={(0, 4): 4, (4, 12): 2})}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=4, unique=True),
       which=st.sampled_from(sorted(_TOKENIZERS)), bos_eos=st.booleans())
def test_every_symbolic_judge_is_silent_on_clean_batches(seeds, which, bos_eos):
    shapes = [((4, 4), (0, 40), True), ((3, 4), (0,), False), ((6, 8), (24, 0), False), ((2, 4), (33, 0), True)]
    pieces = [random_piece(np.random.default_rng(s), shapes[s % 4][0], 50.0 + i * 30 + s % 7, *shapes[s % 4][1:],
                           bars=3) for i, s in enumerate(seeds)]
    t = symbolic_trace(pieces, tok=_TOKENIZERS[which], bos_eos=bos_eos)
    assert all_findings(t) == []


def test_a_decoder_that_returns_no_tempo_or_meter_lost_them():
    t = symbolic_trace(clean_pieces(0), tok=tokenizer(tempos=False, time_signatures=False))
    dec = t["notes.decoded"].meta
    dec["tempos"], dec["time_signatures"] = [None] * 4, [None] * 4  # a decoder that says nothing it did not read
    f = one(judge_round_trip(t))
    assert set(f.evidence["token_types"]) == {"Tempo", "TimeSig"}
