"""Find the same audio on two sides of a split: exact copies by hash, near-duplicates and
overlapping windows by fingerprint search (faiss) then alignment of the candidates.

    exact           the decoded samples are identical
    near-duplicate  aligned envelopes agree (≥ NEAR_SIMILARITY) over most of the shorter clip
                    (≥ NEAR_COVERAGE): a re-gain, re-encode, resampling, noisier copy or a crop
    overlap         they agree as well over part of both (≥ 1 s, < NEAR_COVERAGE): windows cut
                    from one recording with overlap, then split

In both, one lag must hold across the whole overlap (`Alignment.spread_seconds`): the same notes
played at a slightly different tempo (another take) match the envelope but drift in time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..audio.fingerprint import DIM, align
from .search import SHARD_VECTORS, ShardRunner, sharded_neighbours

__all__ = ["Entry", "Match", "find_matches", "train_split", "NEAR_SIMILARITY", "NEAR_COVERAGE"]

CANDIDATE_SIMILARITY = 0.85  # window cosine worth an alignment (copies score ≥ 0.93)
NEAR_SIMILARITY = 0.92  # aligned envelope correlation: copies ≥ 0.95, other clips ≤ 0.87 ...
MAX_SPREAD_SECONDS = 0.008  # ... except the same notes at a tempo ~1 % apart, whose lag drifts
NEAR_COVERAGE = 0.8
MIN_OVERLAP_SECONDS = 1.0
NEIGHBOURS = 10  # per query window
MAX_CANDIDATES = 16  # per query item


@dataclass
class Entry:
    """What cross-split judges need to know about one example."""

    split: str
    ref: str
    where: str  # ref plus manifest line, for messages
    audio_hash: str = ""
    seconds: float = 0.0
    silent: bool = False
    source_id: str | None = None
    title: str | None = None
    artist: str | None = None
    cache_refs: list[str] = field(default_factory=list)
    cache_hashes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Match:
    a: int  # entry numbers; a lies in the smaller (evaluation) split
    b: int
    kind: str  # "exact", "near" or "overlap"
    similarity: float = 1.0
    coverage: float = 1.0
    overlap_seconds: float = 0.0
    lag_seconds: float = 0.0


def train_split(sizes: dict[str, int]) -> str:
    """The training split: named so, else the largest."""
    for name in ("train", "training"):
        if name in sizes:
            return name
    return max(sizes, key=lambda s: sizes[s])


def side_rank(sizes: dict[str, int]) -> Callable[[str], tuple[bool, int]]:
    """Sort key of splits: evaluation splits first (smallest first), the training split last. A
    pair is reported from its evaluation side: "valid x has a copy in train"."""
    train = train_split(sizes)
    return lambda split: (split == train, sizes[split])


def _exact(entries: Sequence[Entry], sizes: dict[str, int]) -> list[Match]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(entries):
        if e.audio_hash and not e.silent:  # digital silence is everywhere; audio.silent reports it
            groups[e.audio_hash].append(i)
    out = []
    for members in groups.values():
        by_split: dict[str, int] = {}
        for i in members:
            by_split.setdefault(entries[i].split, i)
        if len(by_split) > 1:
            rank = side_rank(sizes)
            ordered = sorted(by_split.values(), key=lambda i: rank(entries[i].split))
            out += [Match(a, ordered[-1], "exact", overlap_seconds=entries[a].seconds) for a in ordered[:-1]]
    return out


def find_matches(entries: Sequence[Entry], windows: Sequence[np.ndarray],
                 frames_of: Callable[[int], np.ndarray | None], threads: int = 1,
                 progress: Callable[[str], None] | None = None, shard_vectors: int = SHARD_VECTORS,
                 run_shards: ShardRunner | None = None) -> tuple[list[Match], dict[str, float]]:
    """Every cross-split exact, near-duplicate and overlapping pair, and search statistics. Past
    `shard_vectors` indexed vectors the search is sharded (`search.sharded_neighbours`, shards mapped
    by `run_shards`: in turn here when None)."""
    sizes: dict[str, int] = defaultdict(int)
    for e in entries:
        sizes[e.split] += 1
    matches = _exact(entries, sizes)
    stats = {"vectors": 0.0, "candidates": 0.0, "aligned": 0.0, "retimed": 0.0}
    if len(sizes) < 2:
        return matches, stats
    big, rank = train_split(sizes), side_rank(sizes)
    owner = np.concatenate([np.full(len(w), i, np.int64) for i, w in enumerate(windows)] or [np.zeros(0, np.int64)])
    # Kept as they were stored (float16, 144 bytes a window): each index and each query set is made
    # float32 on its own, so the driver never holds a float32 copy of every window at once.
    vectors = np.concatenate([w for w in windows] or [np.zeros((0, DIM), np.float16)])
    stats["vectors"] = float(len(vectors))
    if not len(vectors):
        return matches, stats
    # Each evaluation split searches an index of the *other* splits only: a clip's own windows (a
    # repeated phrase, a loop) would otherwise fill its top-k and push the real copy out.
    split_of = np.array([e.split for e in entries], dtype=object)[owner]
    found: dict[tuple[int, int], float] = {}
    for split in sorted(s for s in sizes if s != big):
        mine = split_of == split
        if not mine.any() or mine.all():
            continue
        if progress:
            progress(f"indexing {int((~mine).sum()):,} window fingerprints for the {split} split")
        # One index here while it fits; past that, shards searched in turn here or as tasks of `run_shards`.
        many = (~mine).sum() > shard_vectors
        pairs = sharded_neighbours(vectors[~mine], owner[~mine], vectors[mine], owner[mine], NEIGHBOURS,
                                   CANDIDATE_SIMILARITY, shard_vectors=shard_vectors, threads=threads,
                                   run=run_shards if many else None)
        for pair, sim in pairs.items():
            found[pair] = max(sim, found.get(pair, -1.0))
    # Keep cross-split pairs, once each, eval side first; at most MAX_CANDIDATES per query item.
    per_item: dict[int, list[tuple[float, int]]] = defaultdict(list)
    done = {(m.a, m.b) for m in matches} | {(m.b, m.a) for m in matches}
    for (a, b), s in found.items():
        if entries[a].split == entries[b].split or (a, b) in done:
            continue
        if rank(entries[b].split) < rank(entries[a].split):
            a, b = b, a
        per_item[a].append((s, b))
    pairs = {(a, b) for a, cands in per_item.items() for _, b in sorted(cands, reverse=True)[:MAX_CANDIDATES]}
    stats["candidates"] = float(len(pairs))
    if progress:
        progress(f"aligning {len(pairs):,} candidate pairs")
    current, fa = -1, None
    for a, b in sorted(pairs):  # by query item: its frames load once, the others as needed
        if a != current:
            current, fa = a, frames_of(a)
        fb = frames_of(b)
        if fa is None or fb is None or not fa.size or not fb.size:
            continue
        al = align(fa, fb, MIN_OVERLAP_SECONDS)
        stats["aligned"] += 1
        if al.similarity < NEAR_SIMILARITY:
            continue
        if al.spread_seconds > MAX_SPREAD_SECONDS:
            stats["retimed"] = stats.get("retimed", 0.0) + 1  # similar music, not the same recording
            continue
        kind = "near" if al.coverage >= NEAR_COVERAGE else "overlap"
        matches.append(Match(a, b, kind, al.similarity, al.coverage, al.overlap_seconds, al.lag_seconds))
    return matches, stats
