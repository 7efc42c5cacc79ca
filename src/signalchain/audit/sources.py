"""Read what a dataset says about itself: AudioCraft manifests, Hugging Face audiofolders, plain
folders. A broken line or file is a finding naming it; reading goes on with the next one.

    egs/train/data.jsonl          AudioCraft: {"path", "duration", "sample_rate", ...} per line,
                                  metadata in <audio>.json beside each file (or "info_path")
    data/metadata.csv|.jsonl      HF audiofolder: a "file_name" column, relative to the folder
    data/**/*.wav (+ .json/.txt)  plain folder: sidecar JSON (AudioCraft style) or a .txt caption

A folder holding `train/`, `valid/`, `test/`… is one dataset per subfolder, each its own split.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..audio._files import (
    Listing,
    check_path,
    display_path,
    has_surrogates,
    list_files,
    open_regular,
)
from ..checks.base import make
from ..errors import SignalchainError, UsageError
from ..findings import Finding
from ..records.audit import CACHE_KEYS, STAGE_DATASET, Item
from .rows import Row, csv_rows, invalid, json_rows, short

__all__ = ["Source", "AUDIO_EXTENSIONS", "SPLIT_NAMES", "resolve_sources", "read_items"]

CHECK = "audit.sources"
AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".opus", ".aif", ".aiff", ".au", ".w64", ".caf")
SPLIT_NAMES = ("train", "training", "valid", "validation", "val", "dev", "eval", "evaluation", "test")
MANIFEST_NAMES = ("data.jsonl", "data.jsonl.gz")
METADATA_NAMES = ("metadata.jsonl", "metadata.csv")
CAPTION_LIMIT = 1 << 20  # bytes of a .txt caption file


@dataclass(frozen=True)
class Source:
    split: str
    path: Path
    kind: str  # "audiocraft", "audiofolder" or "folder"


def _kind(path: Path) -> tuple[str, Path]:
    state = check_path(path)
    if state.kind == "not_regular" and not path.is_dir():
        raise UsageError(f"{display_path(path)}: {state.detail}, not a manifest or a folder")
    if state.regular:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            return "audiocraft", path
        raise UsageError(f"{display_path(path)}: not a manifest; give a .jsonl or .jsonl.gz file, an audiofolder or "
                         "a folder of audio")
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


def _split_folders(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and p.name.lower() in SPLIT_NAMES)
    except OSError as exc:
        raise UsageError(f"{display_path(path)}: cannot be listed ({exc.strerror or type(exc).__name__})") from None


def resolve_sources(paths: Sequence[str], splits: Sequence[tuple[str, str]] = ()) -> list[Source]:
    """Bare paths (split named after a conventional folder name, else "dataset"; a folder of split
    folders becomes one source per split) and NAME=PATH splits."""
    out: list[Source] = []
    for name, raw in splits:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"--split {name}={display_path(raw)}: no such file or folder")
        kind, where = _kind(path)
        out.append(Source(name, where, kind))
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UsageError(
                f"{display_path(raw)}: no such file or folder; give a manifest (.jsonl, .jsonl.gz) or a folder"
            )
        kind, where = _kind(path)
        subs = _split_folders(path) if path.is_dir() else []
        if kind == "folder" and subs:
            for sub in subs:
                sub_kind, sub_where = _kind(sub)
                out.append(Source(sub.name.lower(), sub_where, sub_kind))
        else:
            out.append(Source(_split_name(path, "dataset"), where, kind))
    return out


def _real(path: Path) -> str:
    """`path` absolute with its symlinks resolved; as written where it cannot be (a symlink loop, a
    NUL byte, a name too long: the reader names the problem)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError, ValueError):
        return os.path.abspath(path)


def _resolve(raw: str, base: Path) -> str:
    """The absolute path a manifest's entry names: relative to the manifest's folder, else to the
    working directory where only that holds it."""
    p = Path(raw)
    if p.is_absolute():
        return str(p)
    for root in (base, Path.cwd()):
        if os.path.exists(root / p):
            return _real(root / p)
    return _real(base / p)


def _named(item: Item) -> Item:
    """`item` with the name findings show (undecodable bytes escaped) and a note when its file
    name is not UTF-8."""
    if item.path is None:
        return item
    item.ref = display_path(item.path)  # control characters too: one finding stays one line
    if has_surrogates(item.path):
        where = "file name" if has_surrogates(os.path.basename(item.path)) else "path (a folder's name)"
        item.name_note = f"the {where} is not UTF-8 (shown with \\x escapes: {os.path.basename(item.ref)})"
    return item


def _cache_refs(meta: dict[str, Any], base: Path) -> list[str]:
    keys = [k for k in meta if k in CACHE_KEYS or (k.endswith("_path") and k not in ("path", "info_path"))]
    return [_resolve(str(meta[k]), base) for k in keys if isinstance(meta[k], str) and meta[k]]


def _declared(source: Source, n: int, row: dict[str, Any]) -> tuple[dict[str, Any], list[Finding]]:
    """The duration, sample rate and channel count a manifest line states, each a finite positive
    number (a NaN, an infinity or a number too large for a float is a finding, not a value)."""
    declared: dict[str, Any] = {}
    bad: list[Finding] = []
    for key in ("duration", "sample_rate", "channels"):
        value = row.get(key)
        if value is None:
            continue
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        try:
            ok = ok and math.isfinite(float(value)) and float(value) > 0
        except OverflowError:
            ok = False
        if not ok:
            bad.append(invalid(source.path, n, f"{key}={short(value)} is not a finite positive number"))
            continue
        declared[key] = value
    return declared, bad


def _audiocraft_item(source: Source, n: int, row: dict[str, Any]) -> Iterator[Item | Finding]:
    base = source.path.parent
    raw = row.get("path")
    if not isinstance(raw, str) or not raw:
        why = f"no 'path' (keys: {short(sorted(row)[:12], 200)})" if "path" not in row else \
            f"'path' is {short(raw)}, not a file name"
        yield invalid(source.path, n, why)
        return
    path = _resolve(raw, base)
    declared, bad = _declared(source, n, row)
    yield from bad
    info = row.get("info_path")
    item = Item(split=source.split, ref=path, path=path, manifest=display_path(source.path), line=n, declared=declared,
                sidecar=_resolve(info, base) if isinstance(info, str) and info else os.path.splitext(path)[0] + ".json")
    item.take_metadata(row)
    item.cache_refs = _cache_refs(row, base)
    yield _named(item)


def _guarded(path: Path, rows: Iterator[Row], build: Callable[[int, dict[str, Any]], Iterable[Item | Finding]]
             ) -> Iterator[Item | Finding]:
    """Each row through `build`; a row that breaks it is that line's finding, and reading goes on."""
    for n, row in rows:
        if isinstance(row, Finding):
            yield row
            continue
        try:
            yield from list(build(n, row))
        except Exception as exc:  # an input nobody foresaw: this line's finding, not the run's end
            yield invalid(path, n, f"cannot be read as an example ({type(exc).__name__}: {str(exc)[:160]})")


def _audiocraft(source: Source) -> Iterator[Item | Finding]:
    yield from _guarded(source.path, json_rows(source.path), lambda n, row: _audiocraft_item(source, n, row))


def _audiofolder(source: Source) -> Iterator[Item | Finding]:
    root = source.path
    jsonl = root / "metadata.jsonl"
    meta_path = jsonl if jsonl.is_file() else root / "metadata.csv"
    rows = json_rows(jsonl) if jsonl.is_file() else csv_rows(meta_path)
    listed: set[str] = set()

    def build(n: int, row: dict[str, Any]) -> Iterator[Item | Finding]:
        name = row.get("file_name")
        if not isinstance(name, str) or not name:
            yield invalid(meta_path, n, f"no 'file_name' (keys: {short(sorted(row)[:12], 200)})")
            return
        path = _real(root / name)
        listed.add(path)
        parts = Path(name).parts
        first = parts[0].lower() if len(parts) > 1 else ""
        item = Item(split=first if first in SPLIT_NAMES and source.split == "dataset" else source.split, ref=path,
                    path=path, manifest=display_path(meta_path), line=n)
        item.take_metadata(row)
        if item.caption is None:
            item.missing_fields = ["caption"]
        item.cache_refs = _cache_refs(row, root)
        yield _named(item)

    yield from _guarded(meta_path, rows, build)
    listing = list_files(root, AUDIO_EXTENSIONS)
    yield from _listing_findings(source, listing)
    for path in listing.files:  # audiofolder wants a row for every file
        if path not in listed:
            yield _named(Item(split=source.split, ref=path, path=path, missing_fields=["metadata row"]))


def _listing_findings(source: Source, listing: Listing) -> Iterator[Finding]:
    for link, why in listing.loops:
        shown = display_path(link)
        yield make("file.symlink_loop", "warning", STAGE_DATASET, f"{shown}: {why}: not followed", CHECK,
                   hint="remove the link; a loader that walks the folder following links never ends (or fails)",
                   path=shown, split=source.split)
    for folder, why in listing.unlisted:
        shown = display_path(folder)
        yield make("file.unreadable", "error", STAGE_DATASET, f"{shown}: the folder cannot be listed ({why})", CHECK,
                   hint="fix its permissions; the files in it are not audited", path=shown, split=source.split)


def _caption_file(path: str) -> tuple[str | None, str | None]:
    """(caption, error) of the .txt beside an audio file; (None, None) when there is none."""
    text = os.path.splitext(path)[0] + ".txt"
    state = check_path(text)
    if state.kind == "missing":
        return None, None
    if not state.regular:
        return None, f"{display_path(text)} is {state.detail}, not a regular file"
    if state.size > CAPTION_LIMIT:
        return None, f"{display_path(text)} is {state.size:,} bytes, more than a caption ({CAPTION_LIMIT:,})"
    try:
        with os.fdopen(open_regular(text), "rb") as fh:
            raw = fh.read(CAPTION_LIMIT + 1)
        return raw.decode("utf-8").strip(), None
    except UnicodeDecodeError as exc:
        return None, f"{display_path(text)} is not UTF-8 (byte {exc.start})"
    except (OSError, SignalchainError) as exc:
        return None, f"{display_path(text)} cannot be read ({str(exc)[:120]})"


def _folder(source: Source) -> Iterator[Item | Finding]:
    listing = list_files(source.path, AUDIO_EXTENSIONS)
    yield from _listing_findings(source, listing)
    for path in listing.files:
        item = Item(split=source.split, ref=path, path=path, sidecar=os.path.splitext(path)[0] + ".json")
        item.caption, item.caption_error = _caption_file(path)
        yield _named(item)


def read_items(source: Source) -> Iterator[Item | Finding]:
    """Every example of one source, in order, with a finding for each line that cannot be read."""
    if source.kind == "audiocraft":
        yield from _audiocraft(source)
    elif source.kind == "audiofolder":
        yield from _audiofolder(source)
    else:
        yield from _folder(source)
