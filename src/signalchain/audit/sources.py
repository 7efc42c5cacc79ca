"""Read what a dataset says about itself: AudioCraft manifests, Hugging Face audiofolders, plain
folders. A broken line or file is a finding naming it; reading goes on with the next one.

    egs/train/data.jsonl          AudioCraft: {"path", "duration", "sample_rate", ...} per line,
                                  metadata in <audio>.json beside each file (or "info_path")
    data/metadata.csv|.jsonl      HF audiofolder: a "file_name" column, relative to the folder
    data/**/*.wav (+ .json/.txt)  plain folder: sidecar JSON (AudioCraft style) or a .txt caption

A folder holding `train/`, `valid/`, `test/`… is one dataset per subfolder, each its own split.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks.base import make
from ..errors import UsageError
from ..findings import Finding
from .records import CACHE_KEYS, STAGE_DATASET, Item

__all__ = ["Source", "AUDIO_EXTENSIONS", "SPLIT_NAMES", "resolve_sources", "read_items"]

CHECK = "audit.sources"
AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".opus", ".aif", ".aiff", ".au", ".w64", ".caf")
SPLIT_NAMES = ("train", "training", "valid", "validation", "val", "dev", "eval", "evaluation", "test")
MANIFEST_NAMES = ("data.jsonl", "data.jsonl.gz")
METADATA_NAMES = ("metadata.jsonl", "metadata.csv")


@dataclass(frozen=True)
class Source:
    split: str
    path: Path
    kind: str  # "audiocraft", "audiofolder" or "folder"


def _kind(path: Path) -> tuple[str, Path]:
    if path.is_file():
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            return "audiocraft", path
        raise UsageError(f"{path}: not a manifest; give a .jsonl or .jsonl.gz file, an audiofolder or a folder of audio")
    for name in MANIFEST_NAMES:
        if (path / name).is_file():
            return "audiocraft", path / name
    if any((path / name).is_file() for name in METADATA_NAMES):
        return "audiofolder", path
    return "folder", path


def _split_name(path: Path, default: str) -> str:
    for part in (path.name, path.parent.name) if path.is_file() else (path.name,):
        if part.lower() in SPLIT_NAMES:
            return part.lower()
    return default


def resolve_sources(paths: Sequence[str], splits: Sequence[tuple[str, str]] = ()) -> list[Source]:
    """Bare paths (split named after a conventional folder name, else "dataset"; a folder of split
    folders becomes one source per split) and NAME=PATH splits."""
    out: list[Source] = []
    for name, raw in splits:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"--split {name}={raw}: no such file or folder")
        kind, where = _kind(path)
        out.append(Source(name, where, kind))
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"{raw}: no such file or folder; give a manifest (.jsonl, .jsonl.gz) or a folder")
        kind, where = _kind(path)
        subs = sorted(p for p in path.iterdir() if p.is_dir() and p.name.lower() in SPLIT_NAMES) if path.is_dir() else []
        if kind == "folder" and subs:
            for sub in subs:
                sub_kind, sub_where = _kind(sub)
                out.append(Source(sub.name.lower(), sub_where, sub_kind))
        else:
            out.append(Source(_split_name(path, "dataset"), where, kind))
    return out


def _resolve(raw: str, base: Path) -> str:
    p = Path(raw)
    if p.is_absolute():
        return str(p)
    for root in (base, Path.cwd()):
        if (root / p).exists():
            return str((root / p).resolve())
    return str((base / p).resolve())


def _cache_refs(meta: dict[str, Any], base: Path) -> list[str]:
    keys = [k for k in meta if k in CACHE_KEYS or (k.endswith("_path") and k not in ("path", "info_path"))]
    return [_resolve(str(meta[k]), base) for k in keys if isinstance(meta[k], str) and meta[k]]


def _invalid(source: Source, line: int | None, why: str) -> Finding:
    where = f"{source.path}:{line}" if line else str(source.path)
    return make("manifest.invalid", "error", STAGE_DATASET, f"{where}: {why}", CHECK,
                hint="fix or drop this line; loaders either crash on it or silently skip the example",
                manifest=str(source.path), line=line)


def _lines(source: Source) -> Iterator[tuple[int, bytes]]:
    opener = gzip.open if source.path.name.endswith(".gz") else open
    with opener(source.path, "rb") as fh:  # type: ignore[operator]
        yield from enumerate(fh, start=1)


def _json_rows(source: Source) -> Iterator[tuple[int, dict[str, Any] | Finding]]:
    """Each non-blank line as a dict, or the finding that says why it is not one."""
    try:
        for n, raw in _lines(source):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield n, _invalid(source, n, f"not UTF-8 (byte {exc.start} of the line is {raw[exc.start]:#04x})")
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                yield n, _invalid(source, n, f"invalid JSON at column {exc.colno}: {exc.msg}")
                continue
            yield n, row if isinstance(row, dict) else _invalid(source, n, f"a JSON {type(row).__name__}, not an object")
    except (OSError, EOFError) as exc:  # a truncated .gz, an unreadable file: what was read counts
        yield 0, _invalid(source, None, f"cannot be read to the end ({type(exc).__name__}: {exc})")


def _audiocraft(source: Source) -> Iterator[Item | Finding]:
    base = source.path.parent
    for n, row in _json_rows(source):
        if isinstance(row, Finding):
            yield row
            continue
        if not isinstance(row.get("path"), str) or not row["path"]:
            yield _invalid(source, n, f"no 'path' (keys: {sorted(row)})")
            continue
        path = _resolve(row["path"], base)
        declared: dict[str, Any] = {}
        for key in ("duration", "sample_rate", "channels"):
            value = row.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                yield _invalid(source, n, f"{key}={value!r} is not a positive number")
                continue
            declared[key] = value
        info = row.get("info_path")
        item = Item(split=source.split, ref=path, path=path, manifest=str(source.path), line=n, declared=declared,
                    sidecar=_resolve(info, base) if isinstance(info, str) and info else str(Path(path).with_suffix(".json")))
        item.take_metadata(row)
        item.cache_refs = _cache_refs(row, base)
        yield item


def _csv_rows(source: Source) -> Iterator[tuple[int, dict[str, Any] | Finding]]:
    path = source.path / "metadata.csv"
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for row in reader:
        n = reader.line_num
        bad = [k for k, v in row.items() if isinstance(v, str) and any("\udc80" <= ch <= "\udcff" for ch in v)]
        if bad:
            yield n, make("manifest.invalid", "error", STAGE_DATASET, f"{path}:{n}: column {bad[0]!r} is not UTF-8",
                          CHECK, hint="re-save metadata.csv as UTF-8", manifest=str(path), line=n)
            continue
        yield n, {k: v for k, v in row.items() if k is not None}


def _audiofolder(source: Source) -> Iterator[Item | Finding]:
    root = source.path
    jsonl = root / "metadata.jsonl"
    rows = _json_rows(Source(source.split, jsonl, "audiofolder")) if jsonl.is_file() else _csv_rows(source)
    listed: set[str] = set()
    for n, row in rows:
        if isinstance(row, Finding):
            yield row
            continue
        name = row.get("file_name")
        if not isinstance(name, str) or not name:
            yield _invalid(Source(source.split, jsonl if jsonl.is_file() else root / "metadata.csv", ""), n,
                           f"no 'file_name' (keys: {sorted(row)})")
            continue
        path = str((root / name).resolve())
        listed.add(path)
        first = Path(name).parts[0].lower() if len(Path(name).parts) > 1 else ""
        item = Item(split=first if first in SPLIT_NAMES and source.split == "dataset" else source.split, ref=path,
                    path=path, manifest=str(jsonl if jsonl.is_file() else root / "metadata.csv"), line=n)
        item.take_metadata(row)
        if item.caption is None:
            item.missing_fields = ["caption"]
        item.cache_refs = _cache_refs(row, root)
        yield item
    for path in _audio_files(root):  # audiofolder wants a row for every file
        if str(path) not in listed:
            yield Item(split=source.split, ref=str(path), path=str(path), missing_fields=["metadata row"])


def _audio_files(root: Path) -> list[Path]:
    return sorted(p.resolve() for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())


def _folder(source: Source) -> Iterator[Item | Finding]:
    for path in _audio_files(source.path):
        item = Item(split=source.split, ref=str(path), path=str(path), sidecar=str(path.with_suffix(".json")))
        text = path.with_suffix(".txt")
        if text.is_file():
            raw = text.read_bytes()
            try:
                item.caption = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                item.caption_error = f"{text} is not UTF-8 (byte {exc.start})"
        yield item


def read_items(source: Source) -> Iterator[Item | Finding]:
    """Every example of one source, in order, with a finding for each line that cannot be read."""
    if source.kind == "audiocraft":
        yield from _audiocraft(source)
    elif source.kind == "audiofolder":
        yield from _audiofolder(source)
    else:
        yield from _folder(source)
