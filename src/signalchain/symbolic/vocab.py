"""A miditok-style vocabulary read from its strings, and a token sequence walked into music events.

A symbolic `tokens` tap carries its vocabulary as `"Type_Value"` strings, one per id (`"Pitch_60"`,
`"Position_3"`, `"Duration_1.2.8"`, `"TimeSig_6/8"`, `"Program_-1"`, `"PAD_None"`). That is all the
checks may know of the tokenizer, so everything here is read from it: the note attributes that
follow a pitch, the largest duration, the spacing of the tempo and velocity bins.

Beats follow miditok 3: a position or a duration counts fractions of the time signature's *beat*,
the note of its denominator (a 6/8 bar is six eighth-note beats: `6 * resolution` positions). The
notes table counts quarter notes, so `quarters_per_beat(ts) = 4 / denominator` converts.
Unknown token types are carried along and otherwise ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Vocab", "SequenceEvents", "positions_per_bar", "quarters_per_beat", "walk", "parse_beats",
           "NOTE_TYPES", "NOTE_EVENT_TYPES", "SPECIAL_TYPES"]

NOTE_TYPES = ("Pitch", "PitchDrum")  # a note of REMI/TSD/Structured, its attributes after it
NOTE_EVENT_TYPES = (*NOTE_TYPES, "NoteOn", "DrumOn", "PitchIntervalTime", "PitchIntervalChord")  # any note start
SPECIAL_TYPES = ("PAD", "BOS", "EOS", "MASK")
MERGE = "Merge"  # the type of a BPE id whose string is several base tokens
ATTRIBUTE_ORDER = ("Velocity", "Duration")  # what follows a Pitch in REMI/TSD, for the types the vocab has


def parse_beats(text: str) -> float | None:
    """`"1.2.8"` (beats.positions.resolution) -> 1.25 beats; a plain number as itself; None if neither."""
    parts = text.split(".")
    try:
        if len(parts) == 3:
            return int(parts[0]) + int(parts[1]) / max(int(parts[2]), 1)
        return float(text)
    except ValueError:
        return None


def quarters_per_beat(time_signature: Sequence[int]) -> float:
    """Quarter notes in one beat of a time signature (the note of its denominator)."""
    return 4.0 / float(time_signature[1]) if len(time_signature) > 1 and time_signature[1] else 1.0


def positions_per_bar(time_signature: Sequence[int], resolution: int) -> int:
    """Positions in one bar: `numerator * resolution` (3/4 at 4: 12; 6/8 at 4: 24 eighth-note positions)."""
    return int(time_signature[0]) * int(resolution)


@dataclass
class Vocab:
    """The vocabulary by id: each id's type and raw value, and numeric views of the types that have one."""

    tokens: list[str]
    types: list[str]
    values: list[str]
    pad_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    resolution: int = 8
    merged: dict[int, list[int]] = field(default_factory=dict)  # a BPE merge's id -> the base ids it stands for

    @classmethod
    def parse(cls, tokens: Sequence[str], pad_id: int | None = None, bos_id: int | None = None,
              eos_id: int | None = None, resolution: int | None = None) -> Vocab:
        types, values = [], []
        for t in tokens:
            typ, _, val = str(t).partition("_")
            if " " in str(t).strip():  # a BPE merge: the base tokens it stands for, space-joined
                typ, val = MERGE, str(t)
            types.append(typ)
            values.append(val)
        v = cls(list(map(str, tokens)), types, values)
        v._merges()
        v.pad_id = pad_id if pad_id is not None else v.id_of("PAD_None")
        v.bos_id = bos_id if bos_id is not None else v.id_of("BOS_None")
        v.eos_id = eos_id if eos_id is not None else v.id_of("EOS_None")
        v.resolution = int(resolution) if resolution else v._finest_resolution()
        return v

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Vocab | None:
        """The vocabulary of a symbolic `tokens` tap; None when its meta holds no flat list of strings
        (Octuple's one vocabulary per stream, or none at all)."""
        vocab = meta.get("vocab")
        if not isinstance(vocab, (list, tuple)) or not vocab or not all(isinstance(t, str) for t in vocab):
            return None

        def as_id(key: str) -> int | None:
            x = meta.get(key)
            return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None

        return cls.parse(vocab, as_id("pad_id"), as_id("bos_id"), as_id("eos_id"), as_id("resolution"))

    def __len__(self) -> int:
        return len(self.tokens)

    def _merges(self) -> None:
        """The base ids of each merged id (a part the vocabulary lacks is appended as its own entry)."""
        self.merged = {}
        merged = [i for i, t in enumerate(self.types) if t == MERGE]
        if not merged:
            return
        index = {t: i for i, t in enumerate(self.tokens) if self.types[i] != MERGE}
        for i in merged:
            parts = []
            for part in self.tokens[i].split():
                if part not in index:
                    typ, _, val = part.partition("_")
                    index[part] = len(self.tokens)
                    self.tokens.append(part)
                    self.types.append(typ)
                    self.values.append(val)
                parts.append(index[part])
            self.merged[i] = parts

    def expand(self, ids: np.ndarray) -> np.ndarray:
        """Rows of model ids with every merged id replaced by its base ids, padded at the end with the
        pad id (a PAD entry is appended when the vocabulary has none). Rows without merges come back
        as they were, but padded to the longest row."""
        rows = [[p for i in row.tolist() for p in self.merged.get(int(i), [int(i)])] for row in np.atleast_2d(ids)]
        if self.pad_id is None:
            self.pad_id = len(self.tokens)
            self.tokens.append("PAD_None")
            self.types.append("PAD")
            self.values.append("None")
        width = max((len(r) for r in rows), default=0)
        out = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        for b, r in enumerate(rows):
            out[b, : len(r)] = r
        return out

    def id_of(self, token: str) -> int | None:
        try:
            return self.tokens.index(token)
        except ValueError:
            return None

    def has(self, typ: str) -> bool:
        return typ in self.types

    def type_array(self) -> np.ndarray:
        return np.asarray(self.types, dtype=object)

    def ids(self, typ: str) -> np.ndarray:
        return np.asarray([i for i, t in enumerate(self.types) if t == typ], dtype=np.int64)

    def numbers(self, typ: str) -> dict[int, float]:
        """id -> numeric value for a type ("Pitch" 60, "Duration" 1.25 beats, "Tempo" 121.29, "Program" -1)."""
        out = {}
        for i, (t, v) in enumerate(zip(self.types, self.values)):
            if t == typ:
                x = parse_beats(v)
                if x is not None:
                    out[i] = x
        return out

    def sorted_values(self, typ: str) -> np.ndarray:
        return np.asarray(sorted(set(self.numbers(typ).values())), dtype=np.float64)

    def pitch_range(self, drum: bool = False) -> tuple[int, int] | None:
        vals = self.sorted_values("PitchDrum" if drum and self.has("PitchDrum") else "Pitch")
        return (int(vals[0]), int(vals[-1])) if vals.size else None

    def time_signatures(self) -> dict[int, tuple[int, int]]:
        out = {}
        for i, (t, v) in enumerate(zip(self.types, self.values)):
            if t == "TimeSig":
                num, _, den = v.partition("/")
                if num.isdigit() and den.isdigit():
                    out[i] = (int(num), int(den))
        return out

    def attributes(self) -> tuple[str, ...]:
        """The note attributes that follow a Pitch token, in the tokenizer's order, as far as the vocab has them."""
        return tuple(a for a in ATTRIBUTE_ORDER if self.has(a))

    def max_gap(self, typ: str) -> float | None:
        """The widest spacing between neighbouring values of a type (its bins' resolution); None under two."""
        vals = self.sorted_values(typ)
        return float(np.diff(vals).max()) if vals.size >= 2 else None

    def _finest_resolution(self) -> int:
        res = [int(v.split(".")[2]) for t, v in zip(self.types, self.values)
               if t in ("Duration", "TimeShift") and v.count(".") == 2 and v.split(".")[2].isdigit()]
        return max(res) if res else 8


@dataclass
class SequenceEvents:
    """One sequence walked: its notes (in quarter notes), bars, and the grammar problems met on the way."""

    # (pitch, onset, duration, velocity, program, drum)
    notes: list[tuple[int, float, float, int, int, int]] = field(default_factory=list)
    bars: int = 0
    time_signatures: list[tuple[int, int]] = field(default_factory=list)
    tempos: list[float] = field(default_factory=list)
    programs: list[int] = field(default_factory=list)
    positions_past_bar: list[tuple[int, int, int]] = field(default_factory=list)  # (index, position, per bar)
    position_backwards: int = 0  # a Position earlier than the one before it with no Bar between
    missing_attributes: list[tuple[int, str]] = field(default_factory=list)  # (index of the Pitch, type expected)
    pads_inside: list[int] = field(default_factory=list)
    bos_misplaced: list[int] = field(default_factory=list)
    eos_misplaced: list[int] = field(default_factory=list)
    out_of_range: list[int] = field(default_factory=list)
    unknown_types: set[str] = field(default_factory=set)
    length: int = 0  # ids before trailing padding
    pitch_tokens: int = 0


KNOWN = {"Bar", "Position", "TimeSig", "Tempo", "Program", "Velocity", "Duration", "TimeShift", "Rest",
         "NoteOff", "DrumOff", MERGE, *NOTE_EVENT_TYPES, *SPECIAL_TYPES}


def _specials(ev: SequenceEvents, ids: np.ndarray, vocab: Vocab) -> tuple[np.ndarray, int]:
    """Record pad/bos/eos placement and out-of-range ids; return the ids to walk (no padding) and where they start."""
    pad, bos, eos = vocab.pad_id, vocab.bos_id, vocab.eos_id
    is_pad = ids == pad if pad is not None else np.zeros(len(ids), bool)
    real = np.flatnonzero(~is_pad)
    end = int(real[-1]) + 1 if real.size else 0
    start = int(real[0]) if real.size else 0  # a left-padded row (pads first, then the sequence) is allowed
    ev.length = end
    ev.pads_inside = [int(i) for i in np.flatnonzero(is_pad[start:end]) + start]
    ev.out_of_range = [int(i) for i in np.flatnonzero((ids < 0) | (ids >= len(vocab)))]
    # One id for pad and BOS or EOS (GPT-2's and parler-tts' convention: `pad_token_id = eos_token_id`):
    # that id is padding wherever it stands outside the sequence, so its placement says nothing; an
    # occurrence inside the sequence is already a pad inside.
    if bos is not None and bos != pad:
        ev.bos_misplaced = [int(i) for i in np.flatnonzero(ids == bos) if i != start]
    if eos is not None and eos != pad:
        at = np.flatnonzero(ids == eos)
        ev.eos_misplaced = [int(i) for i in at if i != end - 1] + ([int(i) for i in at[1:]] if at.size > 1 else [])
        ev.eos_misplaced = sorted(set(ev.eos_misplaced))
    return ids[start:end], start


def walk(ids: Sequence[int] | np.ndarray, vocab: Vocab, time_signature: Sequence[int] = (4, 4)) -> SequenceEvents:
    """Walk one REMI/TSD id sequence: bars, positions, time signatures, tempos, programs and notes.

    `time_signature` is the one in force before any TimeSig token (the example's, when the tokenizer
    has none). Onsets and durations come out in quarter notes.
    """
    ev = SequenceEvents()
    ids = np.asarray(ids, dtype=np.int64).ravel()
    body, offset = _specials(ev, ids, vocab)
    types, values, res = vocab.types, vocab.values, vocab.resolution
    ts = (int(time_signature[0]), int(time_signature[1]))
    bar_start, pos, program, n = 0.0, None, 0, len(vocab)
    bar_len = ts[0] * quarters_per_beat(ts)
    started = False  # a Bar seen yet: REMI's first bar starts at 0
    want: list[str] = []  # attributes still expected for the last Pitch
    pitch_at = -1
    pending: dict[str, Any] = {}

    def close_note() -> None:
        if pending:
            ev.notes.append((pending["pitch"], pending["onset"], pending.get("dur", 0.0), pending.get("vel", 0),
                             pending["program"], pending["drum"]))
            pending.clear()

    for j, i in enumerate(body.tolist()):
        k = j + offset
        if i < 0 or i >= n:
            continue
        typ, val = types[i], values[i]
        if want and typ != want[0]:
            ev.missing_attributes.append((pitch_at, want[0]))
            want = []
            close_note()
        if typ == "Bar":
            close_note()
            if started:
                bar_start += bar_len
            started, pos = True, None
            ev.bars += 1
        elif typ == "TimeSig":
            num, _, den = val.partition("/")
            if num.isdigit() and den.isdigit():
                ts = (int(num), int(den))
                bar_len = ts[0] * quarters_per_beat(ts)
                ev.time_signatures.append(ts)
        elif typ == "Position":
            p = parse_beats(val)
            if p is None:
                continue
            p = int(p)
            per_bar = positions_per_bar(ts, res)
            if p >= per_bar:
                ev.positions_past_bar.append((k, p, per_bar))
            if pos is not None and p < pos:
                ev.position_backwards += 1
            pos = p
        elif typ in ("TimeShift", "Rest"):
            beats = parse_beats(val)
            if beats is not None:
                bar_start += (pos or 0) / res * quarters_per_beat(ts) + beats * quarters_per_beat(ts)
                pos = 0
        elif typ == "Tempo":
            x = parse_beats(val)
            if x is not None:
                ev.tempos.append(x)
        elif typ == "Program":
            x = parse_beats(val)
            if x is not None:
                program = int(x)
                if program not in ev.programs:
                    ev.programs.append(program)
        elif typ in NOTE_TYPES:
            close_note()
            ev.pitch_tokens += 1
            pitch = parse_beats(val)
            drum = typ == "PitchDrum" or program == -1
            onset = bar_start + (pos or 0) / res * quarters_per_beat(ts)
            pending.update(pitch=int(pitch or 0), onset=onset, program=0 if program == -1 else program,
                           drum=int(drum))
            want, pitch_at = list(vocab.attributes()), k
        elif typ == "Velocity" and want and want[0] == "Velocity":
            pending["vel"] = int(parse_beats(val) or 0)
            want.pop(0)
        elif typ == "Duration" and want and want[0] == "Duration":
            pending["dur"] = (parse_beats(val) or 0.0) * quarters_per_beat(ts)
            want.pop(0)
        elif typ in NOTE_EVENT_TYPES:  # MIDILike's NoteOn…NoteOff: a note event, not walked into a note
            ev.pitch_tokens += 1
        elif typ not in KNOWN:
            ev.unknown_types.add(typ)
        if not want:
            close_note()
    close_note()  # a Pitch cut by the end of the window keeps what it has; a crop may end anywhere
    return ev
