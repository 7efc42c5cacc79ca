"""Audit splits held in memory (a pipeline's `splits()`): the same judges as the file audit, on
clip objects instead of files.

A record is duck-typed (attributes or mapping keys), in any of the forms pipelines return:
- `audio` ([C, T] or [T], numpy or torch) and `sample_rate` (or `sampling_rate`);
- a Hugging Face `datasets` row: `audio` a decoded `Audio` dict `{"array", "sampling_rate"}`, an
  undecoded one `{"path"}` / `{"bytes"}`, or a torchcodec decoder (`get_all_samples()`);
- a row naming its file: `path`, `file_name`, `audio_filepath`, `audio_path` or `filepath`
  (read with `signalchain.audio.io.read_audio`; a missing or broken file is its own finding);
- metadata only (no audio anywhere): ids and captions are still judged, the audio is not.
Captions, ids and metadata come from `caption`/`metadata`/`source_id`, or else from the row's own
scalar fields (`description`, `text`, `id`, `track_id`…).
"""

from __future__ import annotations

import io
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from .._tensor import to_numpy
from ..audio.fingerprint import DIM
from ..audio.io import read_audio
from ..checks.base import make, run_check
from ..checks.pieces import named_source
from ..findings import Finding
from ..records.audit import STAGE_SPLIT, Item, Measure
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

CHECK = "audit.memory"

__all__ = ["Clip", "ClipAudit", "audit_clips", "clip_fields", "read_clip", "PATH_KEYS"]


#: Fields of a row that name its audio file.
PATH_KEYS = ("path", "file_name", "audio_filepath", "audio_path", "filepath")
_RATE_KEYS = ("sample_rate", "sampling_rate", "sr")


def _get(clip: Any, name: str, default: Any = None) -> Any:
    if isinstance(clip, Mapping):
        return clip.get(name, default)
    return getattr(clip, name, default)


def _first(clip: Any, names: Sequence[str]) -> Any:
    return next((v for v in (_get(clip, n) for n in names) if v is not None), None)


@dataclass
class Clip:
    """One record of `splits()`, read: audio is None for a metadata-only record."""

    audio: np.ndarray | None  # [C, T] float32
    sample_rate: int
    caption: str | None
    metadata: dict[str, Any]
    source_id: str | None
    path: str | None = None  # the file it was read from (None: in memory or no audio)


def _as_audio(x: Any) -> np.ndarray:
    audio = np.asarray(to_numpy(x), dtype=np.float32)
    return audio[None] if audio.ndim == 1 else audio


def _read(path: Any) -> tuple[np.ndarray, int, str]:
    f = read_audio(str(path))  # raises SignalchainError naming the file
    return f.audio, f.sample_rate, f.path


def _audio_of(clip: Any) -> tuple[np.ndarray | None, int, str | None]:
    """(audio [C, T], rate, path) of a record; (None, 0, None) when it carries none."""
    value = _get(clip, "audio")
    rate = _first(clip, _RATE_KEYS)
    if isinstance(value, Mapping):  # an HF `Audio` feature, decoded or not
        if value.get("array") is not None:
            sr = value.get("sampling_rate", value.get("sample_rate", rate))
            if sr is None:
                raise ValueError("the audio dict has an 'array' but no 'sampling_rate'")
            return _as_audio(value["array"]), int(sr), value.get("path")
        if value.get("bytes") is not None:
            data, sr = sf.read(io.BytesIO(value["bytes"]), dtype="float32", always_2d=True)
            return np.ascontiguousarray(data.T), int(sr), value.get("path")
        if value.get("path"):
            return _read(value["path"])
        value = None
    elif hasattr(value, "get_all_samples"):  # datasets >= 4 decodes to a torchcodec AudioDecoder
        samples = value.get_all_samples()
        return _as_audio(samples.data), int(samples.sample_rate), None
    elif isinstance(value, (str, Path)):
        return _read(value)
    if value is not None:
        if rate is None:
            raise ValueError(f"clip {type(clip).__name__} has audio but no sample_rate; splits() records need "
                             ".audio and .sample_rate, an HF Audio dict, or a path to the file")
        return _as_audio(value), int(rate), None
    path = _first(clip, PATH_KEYS)
    if isinstance(path, (str, Path)) and str(path):
        return _read(path)
    return None, 0, None


def _named_path(clip: Any) -> str | None:
    """The file a record names for its audio, if it names one."""
    value = _get(clip, "audio")
    path = value.get("path") if isinstance(value, Mapping) else value if isinstance(value, (str, Path)) else None
    path = path if path is not None else _first(clip, PATH_KEYS)
    return str(path) if isinstance(path, (str, Path)) and str(path) else None


def _row_metadata(clip: Any) -> dict[str, Any]:
    meta = _get(clip, "metadata")
    if isinstance(meta, Mapping):
        return dict(meta)
    if isinstance(clip, Mapping):  # a dataset row: its own scalar fields are the metadata
        return {k: v for k, v in clip.items() if k != "audio" and isinstance(v, (str, int, float, bool, list))}
    return {}


def read_clip(clip: Any) -> Clip:
    """Read one `splits()` record (see the module docstring). Raises when it names audio that cannot
    be read (a missing or broken file, an array without a rate)."""
    audio, sr, path = _audio_of(clip)
    caption = _get(clip, "caption")
    sid = _get(clip, "source_id")
    return Clip(audio, sr, None if caption is None else str(caption), _row_metadata(clip),
                None if sid is None else str(sid), None if path is None else str(path))


def clip_fields(clip: Any) -> tuple[np.ndarray, int, str | None, dict[str, Any], str | None]:
    """(audio [C, T] float32, sample rate, caption, metadata, source id) of a record with audio."""
    c = read_clip(clip)
    if c.audio is None:
        raise ValueError(f"record {type(clip).__name__} carries no audio (no audio, array or path field)")
    return c.audio, c.sample_rate, c.caption, c.metadata, c.source_id


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
    has_audio: bool = True  # False: every record is metadata only (the audio judges were skipped)
    note_matches: list[Any] = field(default_factory=list)  # symbolic splits: midi_search.NoteMatch pairs

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
    per_item: list[tuple[Item, Measure | None]] = []
    silent_records: list[Item] = []  # records with no audio at all
    with_audio = 0  # records that carry (or name) audio, readable or not
    for split, clips in splits.items():
        if progress:
            progress(f"fingerprinting {len(clips)} {split} clips")
        for i, clip in enumerate(clips):
            ref = f"{split}[{i}]"
            try:
                c = read_clip(clip)
            except Exception as exc:  # a record that is not one, or names a broken file: its finding
                path = _named_path(clip)
                missing = path is not None and not os.path.exists(path)
                item = Item(split=str(split), ref=str(path) if missing else ref, path=str(path) if missing else None)
                m = Measure(problem="missing" if missing else f"unreadable: {exc}")
                with_audio += 1
            else:
                name = c.metadata.get("name") or c.source_id
                item = Item(split=str(split), ref=c.path or (ref + (f" {name}" if name else "")), path=c.path,
                            caption=c.caption)
                item.take_metadata({**c.metadata, **({"source_id": c.source_id} if c.source_id else {})})
                named = named_source(c.metadata)  # the file a piece was cut from, where the record names it
                item.origin = named[1] if named and named[0] == "file" else c.path or _named_path(clip)
                if c.audio is None:
                    m = None  # metadata only: ids and captions are judged, the audio cannot be
                    silent_records.append(item)
                else:
                    m = measure_audio(c.audio, c.sample_rate)
                    with_audio += 1
            per_item.append((item, m))
            items.append((item, m.audio_hash if m is not None else ""))
            measures.append(m if m is not None else Measure(problem="no audio"))
            if m is not None and not m.problem and not m.summary.get("nonfinite_fraction"):
                stats[str(split)].add(m.samples, m.total, m.total_sq)
            entries.append(Entry(split=str(split), ref=item.ref, where=item.ref, audio_hash=m.audio_hash if m else "",
                                 seconds=m.seconds if m else 0.0, silent=m is None or m.fp is None or m.fp.silent,
                                 source_id=item.source_id, title=item.title, artist=item.artist))
    if silent_records and not with_audio:
        findings.append(make("split.no_audio", "info", STAGE_SPLIT,
                             f"the split lists carry no audio ({len(silent_records)} records with metadata only: no "
                             f"audio, array or path field): copies, near-copies, windows and statistics across "
                             "splits are not checked; ids and captions are", CHECK,
                             hint="return records with audio and sample_rate, an HF Audio dict, or a path to the "
                                  "file from splits() to check the audio too", records=len(silent_records)))
    for item, m in per_item:
        if m is None and with_audio:  # one record without audio among records with: that record is broken
            m = Measure(problem="unreadable: the record carries no audio (no audio, array or path field)")
        findings += run_check("audit.items", judge_item, item, m, max_caption_tokens)
    t1 = time.perf_counter()
    findings += run_check("audit.captions", judge_captions, items)
    windows = [m.fp.windows if m.fp is not None else np.zeros((0, DIM), np.float32) for m in measures]
    matches, search = find_matches(
        entries, windows, lambda i: None if measures[i].fp is None else measures[i].fp.frames, progress=progress
    )
    findings += run_check("audit.shared_ids", judge_shared_ids, entries)
    findings += run_check("audit.matches", judge_matches, entries, matches)
    findings += run_check("audit.alternate_versions", judge_alternate_versions, entries, matches)
    findings += run_check("audit.cache_refs", judge_cache_refs, entries, matches)
    sizes = {s: len(c) for s, c in splits.items()}
    return ClipAudit(findings, entries, measures, matches, dict(stats), train_split(sizes) if sizes else "train",
                     search, {"measure": t1 - t0, "search": time.perf_counter() - t1},
                     has_audio=bool(with_audio) or not silent_records)
