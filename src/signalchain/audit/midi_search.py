"""Find the same piece of music on two sides of a split, from its notes: exact copies by hash, then
transposed, tempo-changed and re-voiced copies by fingerprint search (the faiss index the audio
audit uses) and a note-level comparison of the candidates.

    duplicate     the same notes (pitches, onsets, durations) at the same tempo
    transposed    the same notes moved by a number of semitones (the shift is named)
    alternate     the same notes at another tempo or time-stretched (the ratio is named), or in
                  another arrangement: other instruments, chords voiced in another octave

A candidate is the same piece when, once the shift and the tempo are undone, its (onset, pitch
class) notes and its melody agree with the other's (mean share ≥ SAME_AGREEMENT); other music in
the same style, or another tune over the same chords, agrees on well under half.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..symbolic.fingerprint import DIM, SymbolicFingerprint, compare
from .leakage import Entry, side_rank, train_split
from .search import WindowIndex, neighbours

__all__ = ["NoteMatch", "find_note_matches", "CANDIDATE_SIMILARITY", "SAME_AGREEMENT", "TEMPO_TOLERANCE"]

CANDIDATE_SIMILARITY = 0.6  # vector cosine worth a comparison (copies ≥ 0.95, other pieces ≤ 0.5)
SAME_AGREEMENT = 0.8  # mean of note and melody agreement: copies 1.0, other tunes on one progression ≤ 0.6
TEMPO_TOLERANCE = 0.02  # a tempo ratio further than this from 1 is another tempo
NEIGHBOURS = 16
MAX_CANDIDATES = 8  # per query piece


@dataclass(frozen=True)
class NoteMatch:
    a: int  # entry numbers; a lies in the smaller (evaluation) split
    b: int
    kind: str  # "duplicate", "transposed" or "alternate"
    similarity: float  # fingerprint cosine (1.0 for an exact copy)
    agreement: float = 1.0  # notes agreeing once shift and tempo are undone
    shift: int = 0  # semitones from b (training side) to a
    tempo_ratio: float = 1.0  # a's tempo over b's
    revoiced: bool = False


def _kind(shift: int, ratio: float, revoiced: bool) -> str:
    if shift != 0:
        return "transposed"
    if abs(ratio - 1.0) > TEMPO_TOLERANCE or revoiced:
        return "alternate"
    return "duplicate"


def _exact(entries: Sequence[Entry], fps: Sequence[SymbolicFingerprint], sizes: dict[str, int]) -> list[NoteMatch]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, fp in enumerate(fps):
        if fp.exact:
            groups[fp.exact].append(i)
    rank, out = side_rank(sizes), []
    for members in groups.values():
        by_split: dict[str, int] = {}
        for i in members:
            by_split.setdefault(entries[i].split, i)
        if len(by_split) > 1:
            ordered = sorted(by_split.values(), key=lambda i: rank(entries[i].split))
            out += [NoteMatch(a, ordered[-1], "duplicate", 1.0) for a in ordered[:-1]]
    return out


def _candidates(entries: Sequence[Entry], fps: Sequence[SymbolicFingerprint], sizes: dict[str, int], threads: int,
                progress: Callable[[str], None] | None) -> dict[tuple[int, int], float]:
    """(evaluation piece, other piece) → cosine, for every split but the training one searching the rest."""
    live = np.array([i for i, fp in enumerate(fps) if not fp.empty], np.int64)
    found: dict[tuple[int, int], float] = {}
    if not len(live):
        return found
    vectors = np.stack([fps[i].vector for i in live]).astype(np.float32).reshape(-1, DIM)
    split_of = np.array([entries[i].split for i in live], dtype=object)
    for split in sorted(s for s in sizes if s != train_split(sizes)):
        mine = split_of == split
        if not mine.any() or mine.all():
            continue
        if progress:
            progress(f"indexing {int((~mine).sum()):,} note fingerprints for the {split} split")
        index = WindowIndex.build(vectors[~mine], live[~mine], threads)
        found.update(neighbours(index, vectors[mine], live[mine], NEIGHBOURS, CANDIDATE_SIMILARITY))
    return found


def find_note_matches(entries: Sequence[Entry], fps: Sequence[SymbolicFingerprint], threads: int = 1,
                      progress: Callable[[str], None] | None = None) -> tuple[list[NoteMatch], dict[str, float]]:
    """Every cross-split duplicate, transposed and alternate pair, and search statistics."""
    sizes: dict[str, int] = defaultdict(int)
    for e in entries:
        sizes[e.split] += 1
    matches = _exact(entries, fps, sizes)
    stats = {"vectors": float(sum(not fp.empty for fp in fps)), "candidates": 0.0, "compared": 0.0}
    if len(sizes) < 2:
        return matches, stats
    side = side_rank(sizes)
    rank = lambda split: (*side(split), split)  # noqa: E731  (two evaluation splits of one size: by name)
    done = {(m.a, m.b) for m in matches} | {(m.b, m.a) for m in matches}
    oriented: dict[tuple[int, int], float] = {}
    for (a, b), s in _candidates(entries, fps, sizes, threads, progress).items():
        if entries[a].split == entries[b].split or (a, b) in done or fps[a].exact == fps[b].exact:
            continue
        if rank(entries[b].split) < rank(entries[a].split):
            a, b = b, a
        oriented[(a, b)] = max(s, oriented.get((a, b), -1.0))  # two evaluation splits find each other twice
    per_item: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for (a, b), s in oriented.items():
        per_item[a].append((s, b))
    pairs = sorted((a, b, s) for a, c in per_item.items() for s, b in sorted(c, reverse=True)[:MAX_CANDIDATES])
    stats["candidates"] = float(len(pairs))
    if progress:
        progress(f"comparing {len(pairs):,} candidate pairs note by note")
    for a, b, s in pairs:
        c = compare(fps[b], fps[a])  # how the evaluation piece was made from the training one
        stats["compared"] += 1
        agreement = 0.5 * (c.agreement + c.melody)
        if agreement >= SAME_AGREEMENT:
            matches.append(NoteMatch(a, b, _kind(c.shift, c.tempo_ratio, c.revoiced), float(s), agreement, c.shift,
                                     c.tempo_ratio, c.revoiced))
    return matches, stats
