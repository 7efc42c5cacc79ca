"""Save and load a golden batch (DESIGN §5): manifest + safetensors + one WAV per audio stage.

Nothing here unpickles. Loading verifies the schema version, the sha256 of every file and of every
value, and refuses anything damaged or changed with a `GoldenFileError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from .._atomic import atomic_directory, previous_dir
from ..audio.io import join_examples, write_audio
from ..errors import GoldenFileError
from ..findings import jsonable
from ..stats import as_batch_audio, content_hash
from ..trace import StageRecord, Trace

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Golden", "save_golden", "load_golden", "wav_name"]

SCHEMA = "signalchain.golden"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
VALUES = "values.safetensors"
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's archive format, which holds pickles
_STORAGES = ("safetensors", "inline")


@dataclass
class Golden:
    """A loaded golden batch: the trace with full values, where it came from, and its folder."""

    path: Path
    trace: Trace
    provenance: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)

    def wav_path(self, stage: str) -> Path | None:
        rec = self.trace.get(stage)
        wav = rec.meta.get("wav") if rec else None
        return self.path / wav["path"] if wav else None


def wav_name(stage: str) -> str:
    return "audio/" + "".join(c if c.isalnum() or c in "._-" else "_" for c in stage) + ".wav"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _inline(value: Any) -> Any:
    """Scalars that are not finite are kept as strings: the manifest is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return jsonable(value)


def save_golden(path: str | Path, trace: Trace, provenance: dict[str, Any], *, write_wavs: bool = True) -> Path:
    """Write `trace` (recorded with values) as a golden batch at `path`, atomically."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    stages = []
    missing = [r.name for r in trace if r.value is None]
    if missing:
        raise GoldenFileError(
            f"{path}: stages {missing} were recorded without values; record with values=True to save a golden"
        )
    with atomic_directory(path) as tmp:
        for rec in trace:
            header = rec.header()
            meta = dict(header["meta"])
            if rec.kind in ("tensor", "audio"):
                arr = np.ascontiguousarray(rec.value)
                arrays[rec.name] = arr
                entry = {"storage": "safetensors", "key": rec.name, "sha256": content_hash(arr)}
                if rec.kind == "audio" and write_wavs and rec.sample_rate and arr.ndim >= 1:
                    joined, segments = join_examples(as_batch_audio(arr), rec.sample_rate)
                    rel = wav_name(rec.name)
                    write_audio(tmp / rel, joined, rec.sample_rate)
                    meta["wav"] = {"path": rel, "segments": segments}
            else:
                data = _inline(rec.value)
                entry = {"storage": "inline", "data": data, "sha256": content_hash(data)}
            header["meta"] = meta
            header["value"] = entry
            stages.append(header)
        save_file(arrays, str(tmp / VALUES), metadata={"schema": SCHEMA})
        files = {VALUES: _file_sha256(tmp / VALUES)}
        for st in stages:
            wav = st["meta"].get("wav")
            if wav:
                files[wav["path"]] = _file_sha256(tmp / wav["path"])
        manifest = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "provenance": jsonable(provenance),
            "files": files,
            "stages": stages,
            "problems": [p.to_dict() for p in trace.problems],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, allow_nan=False), encoding="utf-8")
    return path


def _refuse(path: Path, what: str) -> GoldenFileError:
    return GoldenFileError(f"{path}: {what}")


def _read_manifest(folder: Path) -> dict[str, Any]:
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise _refuse(mpath, "missing; a golden batch folder holds manifest.json, values.safetensors and audio/")
    raw = mpath.read_bytes()
    if raw[:2] in _PICKLE_MAGIC or raw[:4] == _ZIP_MAGIC:
        raise _refuse(mpath, "is a pickle or torch archive, not JSON; signalchain never unpickles")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(mpath, f"is not valid JSON ({exc}); the file is damaged or truncated") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise _refuse(mpath, f"is not a signalchain golden manifest (schema {manifest.get('schema') if isinstance(manifest, dict) else None!r}, expected {SCHEMA!r})")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise _refuse(mpath, f"schema version {version!r} is not supported (this signalchain reads {SCHEMA_VERSION}); recapture it or use the signalchain that wrote it")
    for key in ("files", "stages", "provenance"):
        if key not in manifest:
            raise _refuse(mpath, f"lacks {key!r}; the file is damaged")
    return manifest


def _check_file(folder: Path, rel: str, expected: str) -> Path:
    fpath = folder / rel
    if not fpath.is_file():
        raise _refuse(fpath, "is listed in manifest.json but missing")
    with open(fpath, "rb") as fh:
        head = fh.read(4)
    if head[:2] in _PICKLE_MAGIC or head == _ZIP_MAGIC:
        raise _refuse(fpath, "holds a pickle (or a torch.save archive); signalchain never unpickles - save values as safetensors")
    actual = _file_sha256(fpath)
    if actual != expected:
        raise _refuse(fpath, f"sha256 {actual[:12]}… does not match the manifest's {expected[:12]}…: the file was changed or damaged after capture")
    return fpath


def load_golden(path: str | Path) -> Golden:
    """Load and verify a golden batch; raise `GoldenFileError` naming the file at the first problem."""
    folder = Path(path)
    if not folder.exists() and previous_dir(folder).exists():
        folder = previous_dir(folder)  # a save was interrupted between its two renames
    if not folder.is_dir():
        raise GoldenFileError(f"{folder}: no golden batch here (expected a folder made by `signalchain capture`)")
    manifest = _read_manifest(folder)
    files = manifest["files"]
    if VALUES not in files:
        raise _refuse(folder / MANIFEST, f"does not list {VALUES}")
    for rel, sha in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise _refuse(folder / MANIFEST, f"lists a file outside the golden folder: {rel!r}")
        _check_file(folder, rel, sha)
    try:
        arrays = load_file(str(folder / VALUES))
    except Exception as exc:
        raise _refuse(folder / VALUES, f"is not a readable safetensors file ({exc})") from None
    trace = Trace()
    for st in manifest["stages"]:
        value_entry = st.get("value") or {}
        storage = value_entry.get("storage")
        if storage not in _STORAGES:
            raise _refuse(folder / MANIFEST, f"stage {st.get('name')!r} uses storage {storage!r}; allowed: {', '.join(_STORAGES)}")
        if storage == "safetensors":
            key = value_entry.get("key")
            if key not in arrays:
                raise _refuse(folder / VALUES, f"has no tensor {key!r} for stage {st.get('name')!r}")
            value: Any = arrays[key]
        else:
            value = value_entry.get("data")
        if content_hash(value) != value_entry.get("sha256"):
            raise _refuse(folder / (VALUES if storage == "safetensors" else MANIFEST),
                          f"value of stage {st.get('name')!r} does not match its sha256: it was changed after capture")
        if st.get("kind") == "scalar" and isinstance(value, str):
            value = float(value)
        trace.append(StageRecord(
            name=st["name"], order=int(st["order"]), kind=st["kind"], dtype=st["dtype"],
            shape=list(st["shape"]), device=st["device"], summary=st["summary"], meta=st.get("meta") or {},
            value=value,
        ))
    return Golden(path=folder, trace=trace, provenance=manifest["provenance"], manifest=manifest)
