"""Which examples are pieces of one recording: crops, segments and chunks that keep their source's
caption. Judges of captions count sources, not pieces: AudioCraft samples segments of each file at
load time (each with the file's MusicInfo), and a dreambooth dataset is often one long take cut into
30 s files that share its caption; neither is a caption problem.

The source of an example is read off what its record names, most explicit first:
- a source-id field (`source_id`, `track_id`, …): that recording, literally;
- the file its audio comes from (`path`, `file_name`, … or AudioCraft's nested `meta.path`): pieces
  cut from one file name it; chunk files (`take_000.wav`, `take_001.wav`) name it without their
  piece number, which is believed only where every chunk of that name keeps one caption (a
  numbered dataset, `0001.wav` … `0480.wav`, has many captions under one stripped name);
- nothing: the example is its own source.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from ..records.audit import SOURCE_KEYS

__all__ = ["FILE_KEYS", "named_source", "piece_stem", "sources", "count_recordings"]

#: Fields naming the audio file of a record (AudioCraft, HF audiofolder, NeMo-style manifests).
FILE_KEYS = ("path", "file_name", "audio_filepath", "audio_path", "filepath", "file", "filename", "audio_file")
#: A trailing piece number: `_003`, `-chunk3`, ` part 2`, `.seg12`.
_PIECE = re.compile(r"(?:[\s._-]*(?:chunk|part|piece|seg|segment|clip|window|crop|slice))?[\s._-]*\d+$", re.I)


def named_source(meta: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """("id", value) from a source-id field, ("file", path) from a field naming the audio file."""
    if not isinstance(meta, Mapping):
        return None
    for key in SOURCE_KEYS:
        if meta.get(key) not in (None, ""):
            return ("id", str(meta[key]))
    nested = meta.get("meta")  # AudioCraft's SegmentInfo: {"meta": AudioMeta(path=...), "seek_time": ...}
    for where in (meta, nested if isinstance(nested, Mapping) else {}):
        for key in FILE_KEYS:
            if isinstance(where.get(key), str) and where[key].strip():
                return ("file", where[key])
    return None


def piece_stem(path: str) -> str:
    """The file's folder and name without its extension and a trailing piece number."""
    p = PurePath(path.replace("\\", "/"))
    return str(p.parent / _PIECE.sub("", p.stem))


def _norm(caption: str) -> str:
    return " ".join(caption.lower().split())


def sources(named: Sequence[tuple[str, str] | None], captions: Sequence[str | None]) -> list[str | None]:
    """Each example's source key, or None where its record names no source (its own source).

    Chunks are grouped by `piece_stem` only where every example under that stem has one caption;
    elsewhere the file itself is the source (segments of one file still share it)."""
    stems = [piece_stem(n[1]) if n and n[0] == "file" else None for n in named]
    caps_of: dict[str, set[str]] = defaultdict(set)
    for stem, caption in zip(stems, captions):
        if stem is not None and caption and caption.strip():
            caps_of[stem].add(_norm(caption))
    out: list[str | None] = []
    for n, stem in zip(named, stems):
        if n is None:
            out.append(None)
        elif n[0] == "id":
            out.append("id:" + n[1])
        else:
            out.append("stem:" + stem if len(caps_of.get(stem or "", ())) <= 1 else "file:" + n[1])
    return out


def count_recordings(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> int | None:
    """How many recordings (caption, metadata) rows are pieces of; None when no record names a source.
    A row whose record names none counts as its own, one per distinct record."""
    named = [named_source(m) for _, m in rows]
    if not any(named):
        return None
    keys = sources(named, [c for c, _ in rows])
    return len({k if k is not None else "record:" + json.dumps(m, sort_keys=True, default=str)
                for k, (_, m) in zip(keys, rows)})
