"""The symbolic bed's data: short pieces from music21's corpus (it ships in the wheel), read into
notes tables, with real attributes (key, meter) and, chosen per piece from its id, a tempo, an
ensemble of General MIDI programs and, for a third of them, a generated drum part.

Parsing with music21 is slow (~0.1-0.3 s a piece), so the built tables are cached on disk
(`$XDG_CACHE_HOME/signalchain/symbolic-bed-<music21>-<hash>.npz`, written atomically; a damaged file is
rebuilt) and in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from signalchain.symbolic import COL, notes_table

__all__ = ["Piece", "PIECE_IDS", "load_pieces", "cache_path", "split_of", "caption_of", "ENSEMBLES",
           "GRID", "VELOCITIES"]

DATA_VERSION = 3
GRID = 0.25  # onsets and durations are read on a sixteenth-note grid (the tokenizer's finest)
VELOCITIES = (63, 79, 95)  # weak, medium, strong beat: values on the tokenizer's velocity grid
TEMPOS = tuple(range(60, 165, 5))  # bpm, multiples of 5: on the tokenizer's tempo grid

# (id, corpus path, abc tune number or 0, genre word)
_BACH = ["bwv1.6", "bwv10.7", "bwv101.7", "bwv102.7", "bwv103.6", "bwv104.6", "bwv108.6", "bwv11.6",
         "bwv110.7", "bwv111.6", "bwv112.5", "bwv113.8", "bwv114.7", "bwv115.6", "bwv116.6", "bwv117.4",
         "bwv119.9", "bwv120.6", "bwv121.6", "bwv122.6", "bwv144.6", "bwv124.6", "bwv125.6", "bwv126.6",
         "bwv127.5", "bwv128.5", "bwv13.6", "bwv130.6", "bwv133.6", "bwv135.6", "bwv136.6", "bwv137.5",
         "bwv139.6", "bwv14.5", "bwv140.7", "bwv144.3"]
_JIGS = ["BagOfMealThe", "BottleOfBrandyJig", "BannocksOBarleyMealJig", "BattleTheCashJig",
         "BelleOfTheKitchenJig", "BillyORourkesJig", "BillyPattersonsFavoriteJig",
         "BillyTheBarberShavedHisFatherJig", "BlivensFavoriteJig", "BloomingMeadowsJig", "BobbingForEelsJig",
         "BossJig"]
_AIRS = [(1, 163), (2, 325), (2, 397), (3, 483), (3, 484), (3, 493), (4, 637), (4, 649), (5, 843), (5, 856),
         (6, 1056), (6, 1074)]
PIECE_IDS: tuple[tuple[str, str, int, str], ...] = tuple(
    [(f"bach/{b}", f"bach/{b}.mxl", 0, "chorale") for b in _BACH]
    + [(f"ryansMammoth/{j}", f"ryansMammoth/{j}.abc", 0, "jig") for j in _JIGS]
    + [(f"airdsAirs/{n}", f"airdsAirs/book{b}.abc", n, "air") for b, n in _AIRS])

#: Instrument families and the GM program each plays.
ENSEMBLES = {"choir": 52, "organ": 19, "strings": 48, "brass": 61, "woodwind": 71}
_PAIRS = [("choir",), ("organ",), ("strings",), ("strings", "organ"), ("brass", "organ"), ("woodwind", "strings"),
          ("choir", "organ"), ("brass",), ("woodwind",)]


@dataclass
class Piece:
    """One piece: its notes over the whole piece (example column 0) and what its caption says."""

    id: str
    notes: np.ndarray  # [N, 7] notes table, onsets in beats from the piece's first bar line
    tempo: float  # bpm
    time_signature: tuple[int, int]
    bar_starts: np.ndarray  # beats at which each bar begins
    key: str
    genre: str
    instruments: tuple[str, ...]
    drums: bool
    caption: str = ""
    programs: tuple[int, ...] = field(default_factory=tuple)

    def __repr__(self) -> str:
        return f"Piece({self.id!r}, {len(self.notes)} notes, {self.caption!r})"


def _seed_of(piece_id: str) -> int:
    return zlib.crc32(piece_id.encode())


def tempo_word(bpm: float) -> str:
    for limit, word in ((66, "adagio"), (90, "andante"), (110, "moderato"), (130, "allegretto"), (150, "allegro")):
        if bpm < limit:
            return word
    return "presto"


def caption_of(p: Piece) -> str:
    """"a chorale in G major, 3/4, andante 84 bpm, strings and organ, with drums": the real attributes."""
    drums = ", with drums" if p.drums else ""
    article = "an" if p.genre[0] in "aeiou" else "a"
    return (f"{article} {p.genre} in {p.key}, {p.time_signature[0]}/{p.time_signature[1]}, {tempo_word(p.tempo)} "
            f"{int(round(p.tempo))} bpm, {' and '.join(p.instruments)}{drums}")


def split_of(piece_ids: list[str], valid_share: float = 0.15) -> dict[str, str]:
    """"train" or "valid" for each id, fixed by the ids: the `valid_share` with the lowest hash are valid."""
    ranked = sorted(piece_ids, key=lambda i: hashlib.sha1(i.encode()).hexdigest())
    valid = set(ranked[: max(1, round(valid_share * len(piece_ids)))])
    return {i: "valid" if i in valid else "train" for i in piece_ids}


def _drum_rows(length: float, bar_starts: np.ndarray, ts: tuple[int, int]) -> list[tuple]:
    """Kick 36 / snare 38 / closed hat 42 following the meter, over the whole piece."""
    num, den = ts
    bar = num * 4.0 / den
    if (num, den) == (6, 8):
        pattern = [(0.0, 36), (1.5, 38), (0.0, 42), (1.5, 42)]
    elif num == 3:
        pattern = [(0.0, 36), (1.0, 38), (2.0, 38)] + [(float(i), 42) for i in range(3)]
    else:
        pattern = [(float(b), 36 if b % 2 == 0 else 38) for b in range(num)] + [(float(i), 42) for i in range(num)]
    rows = []
    for start in bar_starts:
        for off, pitch in pattern:
            t = float(start) + off
            if t < length and off < bar:
                vel = {36: 95, 38: 79, 42: 63}[pitch]
                rows.append((0, pitch, t, GRID, vel, 0, 1))
    return rows


def _unisons_merged(table: np.ndarray) -> np.ndarray:
    """Two voices on one note of one instrument sound once (a MIDI track cannot hold both): keep the longest."""
    keep: dict[tuple, np.ndarray] = {}
    for r in table:
        k = (r[COL["pitch"]], r[COL["onset"]], r[COL["program"]], r[COL["drum"]])
        if k not in keep or r[COL["duration"]] > keep[k][COL["duration"]]:
            keep[k] = r
    return notes_table(np.array(list(keep.values()))) if keep else table


def _parse(entry: tuple[str, str, int, str]) -> Piece:
    from music21 import corpus

    pid, path, number, genre = entry
    score = corpus.parse(path, number=number) if number else corpus.parse(path)
    rng = np.random.default_rng(_seed_of(pid))
    ts_obj = score.recurse().getElementsByClass("TimeSignature")
    ts = (int(ts_obj[0].numerator), int(ts_obj[0].denominator)) if ts_obj else (4, 4)
    key = score.analyze("key")
    key_name = f"{key.tonic.name.replace('-', ' flat')} {key.mode}"
    parts = list(score.parts) or [score]
    instruments = _PAIRS[int(rng.integers(len(_PAIRS)))]
    if len(parts) == 1:
        instruments = instruments[:1]
    programs = [ENSEMBLES[instruments[min(i * len(instruments) // len(parts), len(instruments) - 1)]]
                for i in range(len(parts))]
    first = parts[0].getElementsByClass("Measure")
    bar_len = ts[0] * 4.0 / ts[1]
    pickup = 0.0
    if len(first) and first[0].duration.quarterLength < bar_len - 1e-6:
        pickup = float(first[0].duration.quarterLength)  # an anacrusis: bar lines fall after it
    rows = []
    for part, program in zip(parts, programs):
        for n in part.stripTies().flatten().notes:
            dur = float(n.duration.quarterLength)
            if dur <= 0:  # grace notes
                continue
            onset = round(float(n.offset) / GRID) * GRID
            dur = max(GRID, round(dur / GRID) * GRID)
            beat = (onset - pickup) % bar_len
            vel = VELOCITIES[2 if beat < 1e-6 else 1 if abs(beat % 1.0) < 1e-6 else 0]
            for pitch in getattr(n, "pitches", ()):
                rows.append((0, pitch.midi, onset, dur, vel, program, 0))
    table = _unisons_merged(notes_table(rows))
    length = float((table[:, COL["onset"]] + table[:, COL["duration"]]).max()) if len(table) else 0.0
    bar_starts = np.arange(pickup, length, bar_len, dtype=np.float32)
    drums = rng.random() < 1 / 3
    if drums:
        table = notes_table(np.concatenate([table, notes_table(_drum_rows(length, bar_starts, ts))]))
    tempo = float(TEMPOS[int(rng.integers(len(TEMPOS)))])
    p = Piece(pid, table, tempo, ts, bar_starts, key_name, genre, tuple(instruments), bool(drums),
              programs=tuple(sorted(set(programs))))
    p.caption = caption_of(p)
    return p


def cache_path(ids: tuple[tuple[str, str, int, str], ...] = PIECE_IDS) -> Path:
    import importlib.metadata

    version = importlib.metadata.version("music21")
    digest = hashlib.sha1(json.dumps([DATA_VERSION, list(ids)]).encode()).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "signalchain"
    return root / f"symbolic-bed-{version}-{digest}.npz"


_FIELDS = ("id", "tempo", "time_signature", "key", "genre", "instruments", "drums", "caption", "programs")


def _save(path: Path, pieces: list[Piece]) -> None:
    meta = [{f: getattr(p, f) for f in _FIELDS} for p in pieces]
    arrays = {f"notes_{i}": p.notes for i, p in enumerate(pieces)}
    arrays.update({f"bars_{i}": p.bar_starts for i, p in enumerate(pieces)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path, n: int) -> list[Piece] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if len(meta) != n:
                return None
            return [Piece(m["id"], z[f"notes_{i}"].astype(np.float32), float(m["tempo"]), tuple(m["time_signature"]),
                          z[f"bars_{i}"].astype(np.float32), m["key"], m["genre"], tuple(m["instruments"]),
                          bool(m["drums"]), m["caption"], tuple(m["programs"])) for i, m in enumerate(meta)]
    except Exception:  # missing, truncated, or not an npz at all: rebuild
        return None


_MEMORY: dict[str, list[Piece]] = {}


def load_pieces(ids: tuple[tuple[str, str, int, str], ...] = PIECE_IDS) -> list[Piece]:
    """Every piece of `ids`, in order: from memory, the disk cache, or parsed (and cached)."""
    path = cache_path(ids)
    key = str(path)
    if key not in _MEMORY:
        pieces = _load(path, len(ids))
        if pieces is None:
            pieces = [_parse(e) for e in ids]
            _save(path, pieces)
        for p in pieces:
            p.caption = caption_of(p)  # from the attributes: a caption's wording is no reason to reparse
        _MEMORY[key] = pieces
    return _MEMORY[key]


def piece_dict(p: Piece) -> dict[str, Any]:
    return {f: getattr(p, f) for f in _FIELDS}
