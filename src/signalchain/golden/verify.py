"""The meaning of a manifest, checked against itself and against the arrays it describes.

A manifest can be well typed and still wrong: a stage whose recorded dtype or shape is not its
array's, a value whose sha256 is not its content, a file listed twice or not at all, a WAV path
that leaves the folder. Each such claim is checked here; the first false one is a
`GoldenFileError` naming the file and the field.
"""

from __future__ import annotations

import io
import json
import math
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ..audio.io import join_examples
from ..errors import GoldenFileError
from ..stats import as_batch_audio, content_hash, json_summary, scalar_summary, text_summary
from ..trace import is_audio_stage
from ._files import AUDIO_DIR, VALUES
from .rendered import check_rendered_entry
from .schema import SCHEMA, InlineValue, Manifest, StageEntry

__all__ = ["check_manifest", "check_arrays", "check_values_metadata", "check_wavs", "inline_value", "NONFINITE",
           "LOW_PRECISION"]

#: Scalars that are not finite are stored as these strings (the manifest is strict JSON).
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: Torch dtypes numpy lacks: their values are kept as float32 (`_tensor.to_numpy`).
LOW_PRECISION = re.compile(r"^(bfloat16|float8_\w+)$")
#: float32 mantissa bits that a value converted from each low-precision dtype has at zero.
_LOW_BITS = {"bfloat16": 16, "float8_e4m3fn": 20, "float8_e4m3fnuz": 20, "float8_e5m2": 21, "float8_e5m2fnuz": 21}
_FORBIDDEN_IN_NAMES = re.compile(r"[/\\\x00-\x1f\x7f]|\.\.")
_WAV_FILE = re.compile(r"^[\w.-]+\.wav$")


def _bad(path: Path, where: str, what: str) -> GoldenFileError:
    return GoldenFileError(f"{path}: field {where}: {what}")


def _check_stage_name(st: StageEntry, where: str, mpath: Path) -> None:
    if _FORBIDDEN_IN_NAMES.search(st.name) or st.name != st.name.strip():
        raise _bad(mpath, f"{where}.name", f"stage name {st.name!r} holds a path separator, '..', a control "
                   "character or surrounding spaces; stage names are dotted words")


def _check_wav(st: StageEntry, where: str, mpath: Path, seen: dict[str, str]) -> str | None:
    wav = st.meta.wav
    if wav is None:
        return None
    rel = wav.path
    parts = rel.split("/")
    if len(parts) != 2 or parts[0] != AUDIO_DIR or not _WAV_FILE.match(parts[1]):
        raise _bad(mpath, f"{where}.meta.wav.path", f"{rel!r} is not a file of the golden's audio/ folder "
                   "(expected audio/<name>.wav, no '..', no absolute path)")
    if st.kind != "audio":
        raise _bad(mpath, f"{where}.meta.wav", f"stage {st.name!r} is {st.kind}, and only audio stages have a WAV")
    if rel in seen:
        raise _bad(mpath, f"{where}.meta.wav.path", f"{rel!r} is also the WAV of stage {seen[rel]!r}")
    seen[rel] = st.name
    return rel


def _check_inline(st: StageEntry, where: str, mpath: Path) -> None:
    data = st.value.data  # type: ignore[union-attr]
    if st.kind == "text":
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise _bad(mpath, f"{where}.value.data", f"a text stage holds a list of strings; got {type(data).__name__}")
        if st.shape != [len(data)] or st.dtype != "str":
            raise _bad(mpath, f"{where}.shape", f"text of {len(data)} strings is recorded as dtype {st.dtype!r}, "
                       f"shape {st.shape} (expected 'str', [{len(data)}])")
    elif st.kind == "scalar":
        ok = (isinstance(data, (int, float)) and not isinstance(data, bool)) or (
            isinstance(data, str) and data in NONFINITE
        )
        if not ok:
            raise _bad(mpath, f"{where}.value.data", f"a scalar stage holds a number (or 'nan', 'inf', '-inf'); "
                       f"got {data!r:.40}")
        if st.shape != []:
            raise _bad(mpath, f"{where}.shape", f"a scalar has shape []; recorded {st.shape}")
        if st.summary.get("value") != data:
            raise _bad(mpath, f"{where}.summary.value", f"{st.summary.get('value')!r:.40} is not the stored "
                       f"value {data!r:.40}")
    else:  # json: what a tap of something that is neither text nor a number records
        if isinstance(data, (str, int, float)) or (
            isinstance(data, list) and data and all(isinstance(t, str) for t in data)
        ):
            raise _bad(
                mpath, f"{where}.kind", f"a {type(data).__name__} value is recorded as text or a scalar, not json"
            )
        expected = [len(data)] if isinstance(data, list) else []
        if st.shape != expected:
            raise _bad(mpath, f"{where}.shape", f"recorded {st.shape}, but the stored JSON has shape {expected}")
    if content_hash(data) != st.value.sha256:
        raise GoldenFileError(f"{mpath}: value of stage {st.name!r} does not match its sha256: it was changed "
                              "after capture")
    _check_inline_summary(st, data, where, mpath)


_SUMMARY_KEYS = {"json": set(json_summary([])), "scalar": set(scalar_summary(0.0))}


def _check_inline_summary(st: StageEntry, data: Any, where: str, mpath: Path) -> None:
    """An inline stage's summary is derived from its stored value: text's is recomputed whole, and
    json's and a scalar's hold exactly the keys the capture writes (no claim the value cannot back)."""
    if st.kind == "text":
        expected = {k: v for k, v in text_summary(data).items() if k != "hash"}
        got = {k: v for k, v in st.summary.items() if k != "hash"}
        if got != expected:
            key = next((k for k in sorted(set(got) | set(expected)) if got.get(k) != expected.get(k)), "")
            raise _bad(mpath, f"{where}.summary.{key}", f"{got.get(key)!r:.40} is not what its stored text gives "
                       f"({expected.get(key)!r:.40})")
        return
    keys = _SUMMARY_KEYS.get(st.kind)
    if keys is not None and set(st.summary) != keys:
        odd = sorted(set(st.summary) ^ keys)
        raise _bad(mpath, f"{where}.summary", f"a {st.kind} stage's summary holds {sorted(keys)}; "
                   f"{', '.join(map(repr, odd[:3]))} differs")


def _check_array_kind(st: StageEntry, where: str, mpath: Path) -> None:
    """`audio` is what a floating array tapped under an audio.* name or with a sample_rate records."""
    if not st.shape:
        raise _bad(mpath, f"{where}.shape", f"a {st.kind} stage has at least one axis (a 0-d value is a scalar)")
    if st.kind == "audio" and not ("float" in st.dtype and (is_audio_stage(st.name) or st.meta.sample_rate)):
        raise _bad(mpath, f"{where}.kind", f"stage {st.name!r} of dtype {st.dtype!r} is not audio (audio is floating "
                   "point, tapped as audio.* or with a sample_rate)")


def check_manifest(m: Manifest, mpath: Path) -> None:
    """Every claim the manifest makes about itself: names, order, storage, files, hashes."""
    names: set[str] = set()
    wavs: dict[str, str] = {}
    for i, st in enumerate(m.stages):
        where = f"stages[{i}]"
        _check_stage_name(st, where, mpath)
        if st.name in names:
            raise _bad(mpath, f"{where}.name", f"stage {st.name!r} appears twice")
        names.add(st.name)
        if st.order != i:
            raise _bad(mpath, f"{where}.order", f"{st.order} is not the stage's place in the list ({i})")
        stored = "safetensors" if st.kind in ("tensor", "audio") else "inline"
        if st.value.storage != stored:
            raise _bad(mpath, f"{where}.value.storage", f"a {st.kind} stage is stored {stored}, "
                       f"not {st.value.storage}")
        if st.summary.get("hash") != st.value.sha256:
            raise _bad(mpath, f"{where}.summary.hash", "does not match the value's sha256")
        _check_wav(st, where, mpath, wavs)
        check_rendered_entry(st, where, mpath, wavs, _WAV_FILE)
        if isinstance(st.value, InlineValue):
            _check_inline(st, where, mpath)
        else:
            if st.value.key != st.name:
                raise _bad(mpath, f"{where}.value.key", f"{st.value.key!r:.60} is not the stage's name {st.name!r}")
            _check_array_kind(st, where, mpath)
    listed = set(m.files)
    expected = {VALUES, *wavs}
    if listed != expected:
        extra, missing = sorted(listed - expected), sorted(expected - listed)
        what = (f"lists {', '.join(map(repr, extra[:3]))}, which no stage stores" if extra
                else f"does not list {', '.join(map(repr, missing[:3]))}")
        raise _bad(mpath, "files", f"{what}; a golden lists {VALUES} and one WAV per audio "
                   "stage and per rendered notes stage")


def _check_dtype(st: StageEntry, arr: np.ndarray, where: str, mpath: Path) -> None:
    stored, shape = str(arr.dtype), list(arr.shape)
    if st.dtype != stored and not (LOW_PRECISION.match(st.dtype) and stored == "float32"):
        raise _bad(mpath, f"{where}.dtype", f"stage {st.name!r} is recorded as {st.dtype!r}, but its array in "
                   f"{VALUES} is {stored}: the manifest was edited or does not belong to that file")
    if st.shape != shape:
        raise _bad(mpath, f"{where}.shape", f"stage {st.name!r} is recorded with shape {st.shape}, but its array "
                   f"in {VALUES} has shape {shape}")
    low = _LOW_BITS.get(st.dtype, 0)
    if low and stored == "float32" and np.any(np.ascontiguousarray(arr).view(np.uint32) & np.uint32((1 << low) - 1)):
        raise _bad(mpath, f"{where}.dtype", f"stage {st.name!r} is recorded as {st.dtype!r}, but its float32 values "
                   f"in {VALUES} are not all {st.dtype} values")
    for key, actual in (("dtype", stored), ("shape", shape)):
        if st.summary.get(key) != actual:
            raise _bad(mpath, f"{where}.summary.{key}", f"{st.summary.get(key)!r:.40} is not its array's {actual}")
    if st.kind == "audio" and not np.issubdtype(arr.dtype, np.floating):
        raise _bad(mpath, f"{where}.kind", f"audio stage {st.name!r} holds {stored} values; audio is floating point")


def check_arrays(m: Manifest, arrays: dict[str, np.ndarray], folder: Path) -> None:
    """Each array is the one its stage describes: same dtype, same shape, same content hash."""
    vpath, mpath = folder / VALUES, folder / "manifest.json"
    wanted = {st.value.key: (i, st) for i, st in enumerate(m.stages) if st.value.storage == "safetensors"}  # type: ignore[union-attr]
    extra = sorted(set(arrays) - set(wanted))
    if extra:
        raise GoldenFileError(f"{vpath}: holds tensors no stage describes ({', '.join(map(repr, extra[:3]))}): "
                              "the file does not belong to this manifest")
    for key, (i, st) in wanted.items():
        if key not in arrays:
            raise GoldenFileError(f"{vpath}: has no tensor {key!r} for stage {st.name!r}")
        arr, where = arrays[key], f"stages[{i}]"
        _check_dtype(st, arr, where, mpath)
        if content_hash(arr) != st.value.sha256:
            raise GoldenFileError(f"{vpath}: value of stage {st.name!r} does not match its sha256: it was changed "
                                  "after capture")


def check_values_metadata(values: bytes, vpath: Path) -> None:
    """The safetensors header's metadata is the one signalchain writes (read after the Rust parser
    accepted the file, so the header's length and JSON are known to be sound)."""
    (length,) = struct.unpack("<Q", values[:8])
    try:
        header = json.loads(values[8 : 8 + length].decode("utf-8"))
    except (ValueError, RecursionError):
        header = None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if meta != {"schema": SCHEMA}:
        raise GoldenFileError(f"{vpath}: its header metadata is {meta!r:.80}, not {{'schema': {SCHEMA!r}}}: it was "
                              "not written by signalchain, or was edited")


def check_wavs(m: Manifest, arrays: dict[str, np.ndarray], wavs: dict[str, bytes], folder: Path) -> None:
    """Each WAV holds exactly its stage's audio laid end to end where its segments say (what
    `save_golden` wrote): what a user listens to is what the golden compares."""
    for i, st in enumerate(m.stages):
        wav, rate = st.meta.wav, int(st.meta.sample_rate or 0)
        if wav is None:
            continue
        arr, wpath = arrays[st.name], folder / wav.path
        if not 1 <= arr.ndim <= 3 or rate <= 0:
            raise _bad(folder / "manifest.json", f"stages[{i}].meta.wav", f"an audio array of shape "
                       f"{list(arr.shape)} without a sample rate has no WAV")
        joined, segments = join_examples(as_batch_audio(arr), rate)
        if wav.segments != segments:
            raise _bad(folder / "manifest.json", f"stages[{i}].meta.wav.segments",
                       f"are not where the {len(segments)} examples lie in {wav.path}")
        expected = np.where(np.isfinite(joined), joined, 0.0).astype(np.float32).T  # [T, C]
        try:
            with sf.SoundFile(io.BytesIO(wavs[wav.path])) as f:
                ok = f.samplerate == rate and f.channels == expected.shape[1] and f.frames == expected.shape[0]
                audio = f.read(dtype="float32", always_2d=True) if ok else None
        except Exception as exc:  # libsndfile's errors, whatever their type
            raise GoldenFileError(f"{wpath}: is not a readable WAV ({type(exc).__name__}: {str(exc)[:120]})") from None
        if audio is None or audio.tobytes() != np.ascontiguousarray(expected).tobytes():  # bit for bit: -0.0 is not 0.0
            raise GoldenFileError(f"{wpath}: does not hold the audio of stage {st.name!r} ({VALUES}): it was "
                                  "changed after capture")


def inline_value(st: StageEntry) -> Any:
    data = st.value.data  # type: ignore[union-attr]
    if st.kind == "scalar" and isinstance(data, str):
        return NONFINITE[data]
    return data
