"""Save and load a golden batch (DESIGN §5): manifest + safetensors + one WAV per audio stage (and
per notes stage, rendered for listening: `rendered.py`).

A golden is data, never code. Nothing here unpickles or calls `torch.load`. Loading refuses, with
a `GoldenFileError` naming the file: symlinks anywhere in the folder; pickles and torch archives
(by their first bytes); a manifest that is not strict JSON, not of this schema version, whose
self-checksum fails (a hand edit) or whose structure fails the strict schema (`schema.py`); a file
whose sha256 is not the manifest's; an array whose dtype, shape or content is not its stage's
(`verify.py`). Saving writes a temporary sibling folder and swaps it in by renames (`_swap.py`), so
that one complete golden exists at every instant.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save_file

from ..audio.io import join_examples, write_audio
from ..errors import GoldenFileError, SignalchainError
from ..findings import jsonable
from ..stats import as_batch_audio, content_hash
from ..trace import StageRecord, Trace
from . import _swap, rendered
from ._files import MANIFEST, VALUES, GoldenDir, golden_folder, refuse_code
from .schema import SCHEMA, SCHEMA_VERSION, canonical_json, parse_manifest, seal, validate_manifest
from .verify import check_arrays, check_manifest, check_values_metadata, check_wavs, inline_value

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Golden", "save_golden", "load_golden", "wav_name"]

_MISSING = "is listed in manifest.json but missing"


@dataclass
class Golden:
    """A loaded golden batch: the trace with full values, where it came from, and its folder."""

    path: Path
    trace: Trace
    provenance: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)
    #: notes stages rendered to sound at capture (stage → its examples laid end to end)
    renderings: dict[str, rendered.Rendering] = field(default_factory=dict)

    def wav_path(self, stage: str) -> Path | None:
        rec = self.trace.get(stage)
        wav = rec.meta.get("wav") if rec else None
        return self.path / wav["path"] if wav else None


def wav_name(stage: str) -> str:
    return "audio/" + "".join(c if c.isalnum() or c in "._-" else "_" for c in stage) + ".wav"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inline(value: Any) -> Any:
    """Scalars that are not finite are kept as strings: the manifest is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return jsonable(value)


def _unique_wav(stage: str, taken: set[str]) -> str:
    rel, n = wav_name(stage), 1
    while rel in taken:  # "a b" and "a_b" would share a file
        rel = wav_name(f"{stage}_{n}")
        n += 1
    taken.add(rel)
    return rel


def _plan(trace: Trace, write_wavs: bool) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], dict[str, Any]]:
    """Stage headers, the arrays for safetensors, and the WAVs to write (relative path → audio, rate,
    subtype): each audio stage's own samples, and each notes stage rendered."""
    arrays: dict[str, np.ndarray] = {}
    stages, wavs, taken = [], {}, set()
    cache: dict[bytes, Any] = {}
    for rec in trace:
        header = rec.header()
        meta, summary = dict(header["meta"]), dict(header["summary"])
        if rec.kind in ("tensor", "audio"):
            arr = np.ascontiguousarray(rec.value)
            arrays[rec.name] = arr
            digest = content_hash(arr)
            entry = {"storage": "safetensors", "key": rec.name, "sha256": digest}
            # facts of the value itself, so that the loader can hold the manifest to them
            summary.update(dtype=str(arr.dtype), shape=list(arr.shape), hash=digest)
            meta.pop("wav", None)
            meta.pop("rendered", None)
            if rec.kind == "audio" and write_wavs and rec.sample_rate and 1 <= arr.ndim <= 3:
                joined, segments = join_examples(as_batch_audio(arr), rec.sample_rate)
                rel = _unique_wav(rec.name, taken)
                wavs[rel] = (joined, rec.sample_rate, "FLOAT")
                meta["wav"] = {"path": rel, "segments": segments}
            elif write_wavs and rendered.is_notes_stage(rec.kind, meta, arr.shape):
                r = rendered.render_stage(arr, meta, cache)
                rel = _unique_wav(rec.name, taken)
                wavs[rel] = (r.audio, r.sample_rate, "PCM_16")
                meta["rendered"] = {"path": rel, "segments": r.segments, "sample_rate": r.sample_rate,
                                    "renderer": r.renderer}
        else:
            data = _inline(rec.value)
            digest = content_hash(data)
            entry = {"storage": "inline", "data": data, "sha256": digest}
            summary["hash"] = digest
            if rec.kind == "scalar":
                summary["value"] = data
        header.update(meta=meta, summary=summary, value=entry)
        stages.append(jsonable(header))
    return stages, arrays, wavs


def save_golden(path: str | Path, trace: Trace, provenance: dict[str, Any], *, write_wavs: bool = True) -> Path:
    """Write `trace` (recorded with values) as a golden batch at `path`, atomically.

    `path` must be missing, an empty folder or an existing golden (`UsageError` otherwise, naming
    what would have been destroyed). What is written is checked as `load_golden` would check it
    before it replaces anything.
    """
    path = _swap.check_target(path)
    missing = [r.name for r in trace if r.value is None]
    if missing:
        raise GoldenFileError(
            f"{path}: stages {missing} were recorded without values; record with values=True to save a golden"
        )
    stages, arrays, wavs = _plan(trace, write_wavs)
    files = {VALUES: "0" * 64, **{rel: "0" * 64 for rel in wavs}}
    manifest = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "provenance": jsonable(provenance),
                "files": files, "stages": stages, "problems": [p.to_dict() for p in trace.problems]}
    _refuse_unloadable(path, manifest)
    _swap.sweep_stale(path)
    tmp = _swap.make_temp(path)
    try:
        save_file(arrays, str(tmp / VALUES), metadata={"schema": SCHEMA})
        for rel, (audio, rate, subtype) in wavs.items():
            write_audio(tmp / rel, audio, rate, subtype=subtype)
        for rel in files:
            files[rel] = _sha256((tmp / rel).read_bytes())
        _write_manifest(tmp / MANIFEST, seal(manifest))
        _swap.fsync_tree(tmp)
        load_golden(tmp)  # the loader's own verdict on what is about to replace the old golden
        _swap.swap_in(tmp, path)
    except SignalchainError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GoldenFileError(f"{path}: the golden could not be written ({exc.strerror or exc}); the earlier "
                              "golden, if any, is intact") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _refuse_unloadable(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse, before writing anything, a trace whose manifest the loader would refuse."""
    mpath = path / MANIFEST
    try:
        sealed = seal(manifest)
        parse_manifest(canonical_json(sealed), mpath)
        check_manifest(validate_manifest(sealed, mpath), mpath)
    except (GoldenFileError, ValueError, RecursionError) as exc:
        raise GoldenFileError(f"{path}: this trace cannot be saved as a golden: {exc}") from None


def _write_manifest(mpath: Path, manifest: dict[str, Any]) -> None:
    with open(mpath, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=1, allow_nan=False))
        fh.flush()
        os.fsync(fh.fileno())


def _read_files(d: GoldenDir, files: dict[str, str]) -> dict[str, bytes]:
    """Every listed file exists, is a real file, holds no pickle and has the manifest's sha256."""
    out = {}
    for rel in sorted(files):
        fpath = d.path / rel
        data = d.read(rel, _MISSING)
        refuse_code(fpath, data[:9])
        actual = _sha256(data)
        if actual != files[rel]:
            raise GoldenFileError(f"{fpath}: sha256 {actual[:12]}… does not match the manifest's {files[rel][:12]}…: "
                                  "the file was changed or damaged after capture")
        out[rel] = data
    return out


def load_golden(path: str | Path) -> Golden:
    """Load and verify a golden batch; raise `GoldenFileError` naming the file at the first problem.

    The folder is read through one descriptor; when a save swaps a new golden in while it is read
    (and removes files of the old one under the reader), the load starts again from the new one.
    """
    for attempt in range(3):
        last = attempt == 2
        try:
            d = GoldenDir(golden_folder(path))
        except GoldenFileError:
            if last:
                raise
            continue  # the folder went away between finding and opening it: find it again
        with d:
            try:
                return _load(d)
            except GoldenFileError:
                if last or not d.swapped():
                    raise
    raise AssertionError("unreachable")


def _load(d: GoldenDir) -> Golden:
    folder = d.path
    d.refuse_links()
    mpath = folder / MANIFEST
    raw = d.read(MANIFEST, "missing; a golden batch folder holds manifest.json, values.safetensors and audio/")
    refuse_code(mpath, raw[:9])
    obj = parse_manifest(raw, mpath)
    manifest = validate_manifest(obj, mpath)
    check_manifest(manifest, mpath)
    contents = _read_files(d, dict(manifest.files))
    try:
        arrays = load_safetensors(contents[VALUES])
    except Exception as exc:  # the Rust parser's errors; nothing in it can run code
        raise GoldenFileError(f"{folder / VALUES}: is not a readable safetensors file ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    check_arrays(manifest, arrays, folder)
    check_wavs(manifest, arrays, contents, folder)
    renderings = rendered.load_renderings(manifest, arrays, contents, folder)
    check_values_metadata(contents[VALUES], folder / VALUES)
    trace = Trace()
    for st, raw_st in zip(manifest.stages, obj["stages"]):
        value = arrays[st.name] if st.value.storage == "safetensors" else inline_value(st)
        trace.append(StageRecord(
            name=st.name, order=st.order, kind=st.kind, dtype=st.dtype, shape=list(st.shape), device=st.device,
            summary=raw_st["summary"], meta=raw_st["meta"], value=value,
        ))
    return Golden(path=folder, trace=trace, provenance=obj["provenance"], manifest=obj, renderings=renderings)
