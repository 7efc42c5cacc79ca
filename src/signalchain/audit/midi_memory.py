"""Audit symbolic splits held in memory (a symbolic pipeline's `splits()`): the MIDI audit's judges on
records that carry a piece's notes instead of audio.

A record is duck-typed (attributes or mapping keys): `notes`, a notes table `[N, 7]` of the whole
piece (signalchain.symbolic.notes; the example column is ignored), and optionally `tempo` (or
`tempo_bpm`, `bpm`, `qpm`; also read from `metadata`), `caption`, `source_id`, `metadata`, and a
name (`name`, `file`, `path`) that findings show. Records of one split may mix with audio records
of another only in the audio audit: a split list is symbolic when its records carry notes and no audio.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._tensor import to_numpy
from ..checks.base import run_check
from ..findings import Finding
from ..records.audit import Item, Measure
from ..symbolic.fingerprint import SymbolicFingerprint, fingerprint_notes
from ..symbolic.notes import NOTE_COLUMNS
from .judge_items import judge_captions, judge_item
from .judge_splits import judge_alternate_versions, judge_shared_ids
from .leakage import Entry, train_split
from .memory import ClipAudit
from .midi_judge import judge_note_matches, judge_piece
from .midi_run import as_matches
from .midi_search import find_note_matches

__all__ = ["has_notes", "audit_notes"]

_TEMPO_KEYS = ("tempo", "tempo_bpm", "bpm", "qpm")
_NAME_KEYS = ("name", "file", "path", "file_name")


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)


def _first(record: Any, names: Sequence[str]) -> Any:
    return next((v for v in (_get(record, n) for n in names) if v is not None), None)


def has_notes(splits: Mapping[str, Sequence[Any]]) -> bool:
    """Whether the split lists are symbolic: their first records carry `notes` and no `audio`."""
    firsts = [clips[0] for clips in splits.values() if len(clips)]
    return bool(firsts) and all(_get(r, "notes") is not None and _get(r, "audio") is None for r in firsts)


def _metadata(record: Any) -> dict[str, Any]:
    meta = _get(record, "metadata")
    if isinstance(meta, Mapping):
        return dict(meta)
    if isinstance(record, Mapping):
        return {k: v for k, v in record.items() if k != "notes" and isinstance(v, (str, int, float, bool, list))}
    return {}


def _read(record: Any) -> tuple[np.ndarray, float | None, dict[str, Any]]:
    notes = np.asarray(to_numpy(_get(record, "notes")), dtype=np.float32)
    if notes.size == 0:
        notes = notes.reshape(0, len(NOTE_COLUMNS))
    if notes.ndim != 2 or notes.shape[1] != len(NOTE_COLUMNS):
        raise ValueError(f"notes must be a notes table [N, {len(NOTE_COLUMNS)}] ({', '.join(NOTE_COLUMNS)}); "
                         f"got shape {list(notes.shape)}")
    meta = _metadata(record)
    tempo = _first(record, _TEMPO_KEYS)
    tempo = tempo if tempo is not None else next((meta[k] for k in _TEMPO_KEYS if k in meta), None)
    return notes, None if tempo is None else float(np.asarray(to_numpy(tempo)).reshape(-1)[0]), meta


def audit_notes(splits: Mapping[str, Sequence[Any]], max_caption_tokens: int | None = None,
                progress: Callable[[str], None] | None = None) -> ClipAudit:
    """Per-record findings (unreadable, empty), caption duplicates, shared ids, and the same piece
    across splits (duplicate, transposed copy, alternate version), as `audit_clips` does for audio."""
    t0 = time.perf_counter()
    findings: list[Finding] = []
    entries: list[Entry] = []
    fps: list[SymbolicFingerprint] = []
    captions: list[tuple[Item, str]] = []
    for split, records in splits.items():
        if progress:
            progress(f"fingerprinting the notes of {len(records)} {split} pieces")
        for i, record in enumerate(records):
            ref = f"{split}[{i}]"
            problem, fp = None, None
            try:
                notes, tempo, meta = _read(record)
                fp = fingerprint_notes(notes, tempo)
            except Exception as exc:  # a record that is not one: its finding, the others go on
                problem, meta = f"unreadable: the record's notes cannot be read ({exc})", {}
            name = _first(record, _NAME_KEYS) if problem is None else None
            caption = _get(record, "caption")
            item = Item(split=str(split), ref=ref + (f" {name}" if name else ""),
                        caption=None if caption is None else str(caption))
            sid = _get(record, "source_id")
            item.take_metadata({**meta, **({"source_id": str(sid)} if sid is not None else {})})
            findings += run_check("audit.midi", judge_piece, item, problem, fp.notes if fp else 0)
            findings += run_check("audit.items", judge_item, item, None, max_caption_tokens)
            if fp is None:
                continue
            captions.append((item, fp.exact))
            entries.append(Entry(str(split), item.ref, item.ref, fp.exact, silent=fp.empty, source_id=item.source_id,
                                 title=item.title, artist=item.artist))
            fps.append(fp)
    t1 = time.perf_counter()
    findings += run_check("audit.captions", judge_captions, captions)
    matches, search = find_note_matches(entries, fps, progress=progress)
    findings += run_check("audit.shared_ids", judge_shared_ids, entries)
    findings += run_check("audit.midi_matches", judge_note_matches, entries, matches)
    findings += run_check("audit.alternate_versions", judge_alternate_versions, entries, as_matches(matches))
    sizes = {s: len(r) for s, r in splits.items()}
    return ClipAudit(findings, entries, [Measure() for _ in entries], [], {}, train_split(sizes) if sizes else "train",
                     search, {"measure": t1 - t0, "search": time.perf_counter() - t1}, has_audio=False,
                     note_matches=matches)
