"""The round trip's hints follow its evidence: lost pitches against the vocabulary's range, meters against
its TimeSig tokens, the onset token the tokenizer really has. REMI and TSD tokenizers built offline with
their own settings."""

import numpy as np
import pytest

miditok = pytest.importorskip("miditok")

from _symbolic import clean_pieces, symbolic_trace  # noqa: E402
from signalchain.checks.symbolic import judge_round_trip  # noqa: E402
from signalchain.symbolic.notes import COL  # noqa: E402

KINDS = {"REMI": miditok.REMI, "TSD": miditok.TSD}


def build(kind, **settings):
    base = {"use_tempos": True, "use_time_signatures": True, "use_programs": True,
            "special_tokens": ["PAD", "BOS", "EOS"], **settings}
    return KINDS[kind](miditok.TokenizerConfig(**base))


def one(trace):
    got = judge_round_trip(trace)
    assert len(got) == 1, [(f.id, f.message) for f in got]
    return got[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_clean_is_silent_for_each_tokenizer(kind):
    assert judge_round_trip(symbolic_trace(clean_pieces(1), tok=build(kind))) == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_narrow_pitch_range_names_the_pitches_outside_it(kind):
    f = one(symbolic_trace(clean_pieces(0), tok=build(kind, pitch_range=(48, 72))))
    assert f.evidence["token_type"] == "Pitch" and f.evidence["reasons"]["Pitch"] == {
        "outside_range": f.evidence["counts"]["Pitch"]}
    lost = {e["pitch"] for e in f.evidence["examples"]["Pitch"]}
    assert all(not 48 <= p <= 72 for p in lost)
    assert "widen pitch_range to (" in f.hint and "48-72" in f.hint
    # miditok's decoder drops PitchDrum notes outside pitch_range although it encoded them: named as such
    assert f.evidence["reasons"]["PitchDrum"] == {"decoder_range": f.evidence["counts"]["PitchDrum"]}
    assert "the tokens hold these drum notes" in f.hint and f.evidence["vocabulary_mismatch"] is False


def _drop_pitches(lo, hi):
    """A filter between the notes tap and the tokenizer that removes a band of pitches the range covers."""
    def edit(t):
        return t[~((t[:, COL["pitch"]] >= lo) & (t[:, COL["pitch"]] <= hi) & (t[:, COL["drum"]] < 0.5))]
    return edit


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_notes_lost_inside_the_range_do_not_blame_the_range(kind):
    f = one(symbolic_trace(clean_pieces(0), tok=build(kind), hidden=_drop_pitches(60, 66)))
    assert f.evidence["token_type"] == "Pitch"
    assert set(f.evidence["reasons"]["Pitch"]) == {"not_encoded"}
    assert "widen" not in f.hint and "range is not the cause" in f.hint and "21-109" in f.hint


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_meters_outside_the_vocabulary_are_named_with_the_range_to_add(kind):
    f = one(symbolic_trace(clean_pieces(0), tok=build(kind, time_signature_range={4: [4]})))
    assert f.evidence["token_type"] == "TimeSig" and f.evidence["reasons"]["TimeSig"] == {"not_in_vocab": 2}
    assert "3/4, 6/8 are not in the vocabulary (its TimeSig tokens: 4/4)" in f.hint
    assert "{8: [6], 4: [3, 4]}" in f.hint


def test_meters_in_the_vocabulary_lost_before_the_tokenizer_are_not_a_range(monkeypatch):
    import _symbolic

    real = _symbolic.to_score
    monkeypatch.setattr(_symbolic, "to_score", lambda rows, tempo, ts: real(rows, tempo, (4, 4)))  # meter not written
    f = one(symbolic_trace(clean_pieces(0), tok=build("REMI")))
    assert f.evidence["reasons"]["TimeSig"] == {"tokens_other": 2}
    assert "widen" not in f.hint and "3/4 written as 4/4" in f.hint


def test_a_meter_the_tokens_hold_but_the_decoder_misreads():
    t = symbolic_trace(clean_pieces(0), tok=build("TSD"))
    t["notes.decoded"].meta["time_signatures"][1] = [6, 8]  # the tokens say 3/4 (TimeSig_3/4 is in them)
    f = one(t)
    assert f.evidence["reasons"]["TimeSig"] == {"decoded_other": 1}
    assert "3/4 decoded as 6/8" in f.hint and "range is not the cause" in f.hint and "widen" not in f.hint


@pytest.mark.parametrize("kind, onset", [("REMI", "Position"), ("TSD", "TimeShift")])
def test_moved_onsets_blame_the_tokenizers_own_onset_type(kind, onset):
    tok = build(kind)
    inv = {i: s for s, i in tok.vocab.items()}

    def drop_first_onset_token(seqs):  # a token filter that removes one Position / TimeShift of each row
        out = []
        for s in seqs:
            k = next(j for j, i in enumerate(s) if inv[i].startswith(onset) and not inv[i].endswith("_0"))
            out.append(s[:k] + s[k + 1:])
        return out

    f = one(symbolic_trace(clean_pieces(0), tok=tok, edit_ids=drop_first_onset_token))
    assert f.evidence["token_type"] == onset and "quarter notes off" in f.hint
    assert ("Position" in f.message) == (onset == "Position")
    moved = [e["nearest_onset"] - e["onset"] for e in f.evidence["examples"][onset] if "nearest_onset" in e]
    assert moved and np.all(np.abs(moved) > 1 / 8)
