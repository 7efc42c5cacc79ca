"""Audit splits held in memory (a pipeline's `splits()`): the same judges as the file audit, on
clip objects instead of files.

A clip is duck-typed: attributes or mapping keys `audio` ([C, T] or [T], numpy or torch),
`sample_rate`, and optionally `caption`, `metadata` (dict), `source_id`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tensor import to_numpy
from ..audio.fingerprint import DIM
from ..checks.base import run_check
from ..findings import Finding
from .judge_items import judge_captions, judge_item
from .judge_leaks import SplitStats
from .judge_splits import (
    judge_alternate_versions,
    judge_cache_refs,
    judge_matches,
    judge_shared_ids,
)
from .leakage import Entry, Match, find_matches, train_split
from .measure import measure_audio
from .records import Item, Measure

__all__ = ["ClipAudit", "audit_clips", "clip_fields"]


def _get(clip: Any, name: str, default: Any = None) -> Any:
    if isinstance(clip, Mapping):
        return clip.get(name, default)
    return getattr(clip, name, default)


def clip_fields(clip: Any) -> tuple[np.ndarray, int, str | None, dict[str, Any], str | None]:
    """(audio [C, T] float32, sample rate, caption, metadata, source id) of a clip-like object."""
    audio = np.asarray(to_numpy(_get(clip, "audio")), dtype=np.float32)
    sr = _get(clip, "sample_rate")
    if sr is None:
        raise ValueError(f"clip {type(clip).__name__} has no sample_rate; splits() clips need .audio and .sample_rate")
    meta = _get(clip, "metadata") or {}
    caption = _get(clip, "caption")
    return audio, int(sr), None if caption is None else str(caption), dict(meta), _get(clip, "source_id")


@dataclass
class ClipAudit:
    findings: list[Finding]
    entries: list[Entry]
    measures: list[Measure]
    matches: list[Match]
    stats: dict[str, SplitStats]
    train: str
    search: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def by_hash(self) -> dict[str, list[int]]:
        """Exact (mono) audio hash → entry numbers, for matching what loaders yield."""
        out: dict[str, list[int]] = defaultdict(list)
        for i, e in enumerate(self.entries):
            out[e.audio_hash].append(i)
        return out


def audit_clips(splits: Mapping[str, Sequence[Any]], max_caption_tokens: int | None = None,
                progress: Callable[[str], None] | None = None) -> ClipAudit:
    """Per-clip checks, caption duplicates, and every cross-split check that needs only the clips."""
    t0 = time.perf_counter()
    findings: list[Finding] = []
    items: list[tuple[Item, str]] = []
    entries: list[Entry] = []
    measures: list[Measure] = []
    stats: dict[str, SplitStats] = defaultdict(SplitStats)
    for split, clips in splits.items():
        if progress:
            progress(f"fingerprinting {len(clips)} {split} clips")
        for i, clip in enumerate(clips):
            try:
                audio, sr, caption, meta, sid = clip_fields(clip)
            except Exception as exc:  # a clip that is not one: its finding, and the others go on
                item, m = Item(split=str(split), ref=f"{split}[{i}]"), Measure(problem=f"unreadable: {exc}")
            else:
                name = meta.get("name") or sid
                item = Item(split=str(split), ref=f"{split}[{i}]" + (f" {name}" if name else ""), caption=caption)
                item.take_metadata({**meta, **({"source_id": sid} if sid else {})})
                m = measure_audio(audio, sr)
            findings += run_check("audit.items", judge_item, item, m, max_caption_tokens)
            items.append((item, m.audio_hash))
            measures.append(m)
            if not m.summary.get("nonfinite_fraction"):
                stats[str(split)].add(m.samples, m.total, m.total_sq)
            entries.append(Entry(split=str(split), ref=item.ref, where=item.ref, audio_hash=m.audio_hash,
                                 seconds=m.seconds, silent=m.fp is None or m.fp.silent, source_id=item.source_id,
                                 title=item.title, artist=item.artist))
    t1 = time.perf_counter()
    findings += run_check("audit.captions", judge_captions, items)
    windows = [m.fp.windows if m.fp is not None else np.zeros((0, DIM), np.float32) for m in measures]
    matches, search = find_matches(entries, windows, lambda i: None if measures[i].fp is None else measures[i].fp.frames,
                                   progress=progress)
    findings += run_check("audit.shared_ids", judge_shared_ids, entries)
    findings += run_check("audit.matches", judge_matches, entries, matches)
    findings += run_check("audit.alternate_versions", judge_alternate_versions, entries, matches)
    findings += run_check("audit.cache_refs", judge_cache_refs, entries, matches)
    sizes = {s: len(c) for s, c in splits.items()}
    return ClipAudit(findings, entries, measures, matches, dict(stats), train_split(sizes) if sizes else "train",
                     search, {"measure": t1 - t0, "search": time.perf_counter() - t1})
