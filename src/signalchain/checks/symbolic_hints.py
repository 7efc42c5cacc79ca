"""What the round trip says about each token type it blames: a hint written from the disagreements it
counted (the lost pitches against the vocabulary's range, the meters against its TimeSig tokens, where
a note was lost: before the tokens, or between the tokens and the decoded notes), never a canned one.

Each disagreement is tallied under its token type with a *reason* (`outside_range`, `decoder_range`,
`not_encoded`, ...): the hint of a type follows from its most frequent reason and the values behind it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..symbolic.vocab import Vocab

__all__ = ["Tally", "hint", "onset_type", "ts_text", "range_text"]


class Tally:
    """Disagreements by token type, each with its reason, a few examples, and the values behind it."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.reasons: dict[str, Counter[str]] = {}
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.detail: dict[str, Counter[Any]] = {}  # type -> Counter of (reason, value)
        self.matched = 0
        self.truncated = 0  # source notes after the end of a token row that fills the sequence length

    def add(self, typ: str, example: int, what: dict[str, Any], key: Any = None, reason: str = "differs") -> None:
        self.count[typ] += 1
        self.reasons.setdefault(typ, Counter())[reason] += 1
        self.examples.setdefault(typ, [])
        if len(self.examples[typ]) < 5:
            self.examples[typ].append({"example": example, **what})
        if key is not None:
            self.detail.setdefault(typ, Counter())[(reason, key)] += 1

    def values(self, typ: str, reason: str) -> list[Any]:
        """The distinct values tallied for a type and reason, sorted."""
        return sorted({k for (r, k) in self.detail.get(typ, {}) if r == reason})

    def top_reason(self, typ: str) -> str:
        return self.reasons[typ].most_common(1)[0][0] if self.reasons.get(typ) else "differs"


def onset_type(vocab: Vocab) -> str:
    """The token type that places a note in time: REMI's Position, TSD's TimeShift."""
    for typ in ("Position", "TimeShift", "Rest"):
        if vocab.has(typ):
            return typ
    return "Position"


def ts_text(ts: Any) -> str:
    return f"{int(ts[0])}/{int(ts[1])}"


def range_text(r: tuple[int, int] | None) -> str:
    return "none" if r is None else f"{r[0]}-{r[1]}"


def _pitch(vocab: Vocab, tally: Tally, typ: str) -> str:
    reason = tally.top_reason(typ)
    melodic, drums = vocab.pitch_range(False), vocab.pitch_range(True)
    lost = tally.values(typ, reason)
    said = f"{lost[:12]}" + (" …" if len(lost) > 12 else "")
    if reason == "outside_range":
        mel = [p for p, d in lost if not d]
        dr = [p for p, d in lost if d]
        parts = []
        if mel and melodic is not None:
            parts.append(f"pitches {mel[:12]} lie outside the vocabulary's pitch range {range_text(melodic)}: widen "
                         f"pitch_range to ({min(melodic[0], *mel)}, {max(melodic[1], *mel)})")
        if dr and drums is not None:
            knob = "drums_pitch_range" if vocab.has("PitchDrum") else "pitch_range (the drums use Pitch tokens)"
            parts.append(f"drum pitches {dr[:12]} lie outside the drums' range {range_text(drums)}: widen {knob} to "
                         f"({min(drums[0], *dr)}, {max(drums[1], *dr)})")
        return "the tokenizer drops these notes when encoding: " + "; ".join(parts)
    if reason == "decoder_range":
        pitches = [p for p, _ in lost]
        return (f"the tokens hold these drum notes (PitchDrum {pitches[:12]}) but the decoded notes do not: miditok's "
                f"decoder keeps only pitches inside pitch_range {range_text(melodic)}, PitchDrum included, while "
                f"drums are encoded over drums_pitch_range {range_text(drums)}; widen pitch_range to "
                f"({min(melodic[0], *pitches) if melodic else min(pitches)}, "
                f"{max(melodic[1], *pitches) if melodic else max(pitches)}) or decode the drums yourself")
    pitches = [p for p, _ in lost]
    if reason == "decoded_lost":
        return (f"the tokens hold notes at pitches {pitches[:12]} that the decoded notes lack, and the vocabulary's "
                f"range {range_text(melodic)} (drums {range_text(drums)}) covers them: the decoding loses them; decode "
                "with the tokenizer (and config) that encoded, and check what the decode path filters")
    if reason == "not_encoded":
        return (f"notes at pitches {pitches[:12]} never reach the tokens although the vocabulary's range "
                f"{range_text(melodic)} (drums {range_text(drums)}) covers them, so the range is not the cause: the "
                "notes are dropped before or by the encoder (a filter on the notes, a track left out of the Score "
                "handed to the tokenizer); compare that Score with the notes tap")
    return f"notes at pitches {said} do not come back: compare the Pitch ids written with those read"


def _onset(vocab: Vocab, tally: Tally, typ: str) -> str:
    reason = tally.top_reason(typ)
    res = vocab.resolution
    if reason == "ends_early":
        n = tally.reasons[typ]["ends_early"]
        return (f"{n} notes lie after the last decoded note of a row that was not cut by the sequence length (it "
                "ends in padding or an EOS): the tokens stop early; look for a truncation that re-appends EOS, or "
                "a decoder that stops at the first special id")
    shifts = [float(s) for s in tally.values(typ, "moved")]
    moved = ""
    if shifts:
        med = float(np.median(shifts))
        moved = f"onsets come back {med:+.3g} quarter notes off (median of the notes moved), "
    what = (f"{moved}more than one position (1/{res} of a beat)")
    if typ == "TimeShift":
        return (f"{what}: TSD places each note by the TimeShift tokens before it, so one TimeShift dropped, "
                "duplicated or read with another beat_res moves every later note; check beat_res and that nothing "
                "between the notes is filtered or reordered")
    if typ == "Rest":
        return f"{what}: check the Rest and TimeShift tokens and beat_res"
    whole = shifts and all(abs(s * res - round(s * res)) < 1e-6 for s in shifts) and abs(np.median(shifts)) >= 1
    return (f"{what}: " + ("a shift by whole beats points at Position values edited after encoding, or bars decoded "
                           "with another time signature; " if whole else "")
            + "check beat_res and that the tokens are decoded with the time signature and resolution they were "
              "encoded with")


def _time_signature(vocab: Vocab, tally: Tally) -> str:
    if not vocab.has("TimeSig"):
        return "the tokenizer was built without use_time_signatures: every piece decodes as 4/4"
    have = sorted(set(vocab.time_signatures().values()), key=lambda t: (t[1], t[0]))
    parts = []
    absent = [ts for ts in tally.values("TimeSig", "not_in_vocab")]
    if absent:
        by_den: dict[int, list[int]] = {}
        for num, den in [*have, *absent]:
            by_den.setdefault(den, []).append(num)
        wanted = {d: sorted(set(n)) for d, n in sorted(by_den.items(), reverse=True)}
        parts.append(f"{', '.join(map(ts_text, absent))} {'is' if len(absent) == 1 else 'are'} not in the vocabulary "
                     f"(its TimeSig tokens: {', '.join(map(ts_text, have))}): miditok drops them and decodes 4/4; "
                     f"widen time_signature_range, e.g. {wanted}")
    missing = tally.values("TimeSig", "not_in_tokens")
    if missing:
        parts.append(f"{', '.join(map(ts_text, missing))} {'is' if len(missing) == 1 else 'are'} in the vocabulary but "
                     "the tokens hold no TimeSig token for those pieces: the meter never reaches the tokenizer (the "
                     "Score handed to it has none) or its token was cut (a crop or a truncation from the left)")
    other = tally.values("TimeSig", "tokens_other")
    if other:
        parts.append(f"{', '.join(f'{ts_text(a)} written as {ts_text(b)}' for a, b in other)}: the Score handed to "
                     "the tokenizer carries another meter than the notes tap says")
    misread = tally.values("TimeSig", "decoded_other")
    if misread:
        parts.append(f"{', '.join(f'{ts_text(a)} decoded as {ts_text(b)}' for a, b in misread)}: the tokens hold "
                     "the right TimeSig token and the vocabulary has it, so the range is not the cause; the decoding "
                     "misreads it (bar and position arithmetic, or another tokenizer's vocabulary)")
    return "; ".join(parts) or "the time signatures differ: compare the TimeSig tokens with the notes tap's meters"


def hint(blamed: list[str], vocab: Vocab, tally: Tally, mismatch: bool) -> str:
    """The next step for the token type blamed first, from what the tally holds; then, for the next types
    blamed with a cause of their own (not in a vocabulary mismatch), theirs."""
    head = ("most notes are lost on several token types at once, for no reason the vocabulary explains: the "
            "vocabulary at training differs from the one the cache was made with (or the tokens are decoded by "
            "another tokenizer): re-tokenize with the training tokenizer; then: " if mismatch else "")
    also = [] if mismatch else [f"also {t}: {_one(t, vocab, tally)}" for t in blamed[1:3]]
    return head + "; ".join([_one(blamed[0], vocab, tally), *also])


def _one(typ: str, vocab: Vocab, tally: Tally) -> str:
    tempos, vels = vocab.sorted_values("Tempo"), vocab.sorted_values("Velocity")
    if typ in ("Pitch", "PitchDrum"):
        text = _pitch(vocab, tally, typ)
    elif typ in ("Position", "TimeShift", "Rest"):
        text = _onset(vocab, tally, typ)
    elif typ == "TimeSig":
        text = _time_signature(vocab, tally)
    elif typ == "Duration":
        text = (f"durations differ beyond the Duration bins (largest {vocab.sorted_values('Duration')[-1:]} beats): "
                "check beat_res and the Duration tokens")
    elif typ == "Velocity":
        text = ("the tokenizer was built with one velocity bin (num_velocities=1): every note comes back at velocity "
                f"{int(vels[0])}" if vels.size == 1 else
                f"velocities differ beyond one of the {vels.size} bins: check num_velocities and the Velocity ids")
    elif typ == "Tempo":
        text = ("the tokenizer was built without use_tempos: every piece decodes at its default tempo"
                if tempos.size == 0 else f"tempos differ beyond the Tempo bins ({tempos[0]:g}-{tempos[-1]:g} bpm, "
                f"{tempos.size} bins): check tempo_range and num_tempos")
    elif typ == "Program":
        text = _program(vocab, tally)
    else:
        text = f"{typ} tokens disagree: compare the ids written with those read"
    return text


def _program(vocab: Vocab, tally: Tally) -> str:
    if not vocab.has("Program"):
        return "the tokenizer was built without use_programs: tracks beyond the first are lost or merged"
    reason = tally.top_reason("Program")
    tracks = tally.values("Program", reason)
    if reason == "not_in_vocab":
        listed = sorted(int(v) for v in set(vocab.numbers("Program").values()))
        return (f"programs {[p for p, _ in tracks][:8]} are not in the tokenizer's programs list ({len(listed)} "
                f"programs: {listed[:10]}{' …' if len(listed) > 10 else ''}): miditok drops their tracks; add them "
                "to programs")
    if reason == "decoded_lost":
        return (f"the tokens hold the tracks {tracks[:8]} (program, drum) but the decoded notes do not: decode with "
                "the tokenizer that encoded (one_token_stream_for_programs, use_programs as encoded)")
    return (f"programs {tracks[:8]} (program, drum) are lost or changed: check the tokenizer's programs list, the "
            "Program ids and one_token_stream_for_programs")
