"""Pure summaries of tensors, audio and text: numbers in, plain JSON-able numbers out.

These are the numbers every stage record carries and the first thing every check reads. They are
computed on finite values only; how many values were not finite is reported separately, so one NaN
does not hide the scale of everything else.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "SILENCE_DBFS",
    "CLIP_LEVEL",
    "DB_FLOOR",
    "content_hash",
    "tensor_summary",
    "audio_summary",
    "audio_example_summary",
    "as_batch_audio",
    "text_summary",
    "json_summary",
    "scalar_summary",
    "to_dbfs",
]

SILENCE_DBFS = -60.0  # a frame quieter than this (RMS, full scale = 0 dB) counts as silent
CLIP_LEVEL = 0.999  # |sample| at or above this counts as clipped
DB_FLOOR = -120.0  # dB values are floored here so that digital silence stays a number
_FRAME_SECONDS = 0.02


def to_dbfs(amplitude: float) -> float:
    """20·log10(amplitude), floored at DB_FLOOR."""
    return float(max(20.0 * math.log10(amplitude), DB_FLOOR)) if amplitude > 0 else DB_FLOOR


def content_hash(value: Any) -> str:
    """sha256 of a value's exact content: dtype, shape and bytes for arrays, canonical JSON otherwise."""
    h = hashlib.sha256()
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        h.update(f"{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    else:
        h.update(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode())
    return h.hexdigest()


def _finite_stats(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {"min": None, "max": None, "mean": None, "std": None, "abs_max": None}
    x = x.astype(np.float64, copy=False)
    return {
        "min": float(x.min()),
        "max": float(x.max()),
        "mean": float(x.mean()),
        "std": float(x.std()),
        "abs_max": float(np.abs(x).max()),
    }


def tensor_summary(arr: np.ndarray) -> dict[str, Any]:
    """Shape, dtype, range, moments, finite/zero fractions and a content hash of any array."""
    arr = np.asarray(arr)
    n = int(arr.size)
    out: dict[str, Any] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "numel": n}
    if arr.dtype == np.bool_:
        true = int(arr.sum())
        out.update(true_fraction=true / n if n else None, zero_fraction=(n - true) / n if n else None)
        out.update(_finite_stats(arr.astype(np.float64)))
    elif np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.complexfloating):
        if np.iscomplexobj(arr):
            arr = np.abs(arr)
        finite = np.isfinite(arr)
        n_finite = int(finite.sum())
        vals = arr[finite] if n_finite < n else arr.ravel()
        out.update(_finite_stats(vals))
        out.update(
            finite_fraction=n_finite / n if n else 1.0,
            nan_count=int(np.isnan(arr).sum()),
            inf_count=int(np.isinf(arr).sum()),
            zero_fraction=float((vals == 0).sum()) / n if n else None,
        )
    elif np.issubdtype(arr.dtype, np.integer):
        out.update(_finite_stats(arr.ravel()))
        out["zero_fraction"] = float((arr == 0).sum()) / n if n else None
        out["unique"] = int(np.unique(arr).size) if n else 0
    else:
        out["note"] = f"no numeric summary for dtype {arr.dtype}"
    out["hash"] = content_hash(arr)
    return out


def as_batch_audio(audio: np.ndarray) -> np.ndarray:
    """View audio as [B, C, T]: `[T]` is one mono example, `[C, T]` one example of C channels."""
    audio = np.asarray(audio)
    if audio.ndim == 1:
        return audio[None, None, :]
    if audio.ndim == 2:
        return audio[None, :, :]
    if audio.ndim == 3:
        return audio
    raise ValueError(f"audio must be [T], [C, T] or [B, C, T]; got shape {tuple(audio.shape)}")


def audio_example_summary(x: np.ndarray, sample_rate: int | None = None) -> dict[str, Any]:
    """Level, silence, clipping, DC and channel relations of one example `[C, T]`."""
    with np.errstate(invalid="ignore", over="ignore"):  # garbage in (a misread file) is measured, not warned about
        x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    channels, length = x.shape
    finite = np.isfinite(x)
    nonfinite_fraction = 1.0 - float(finite.mean()) if x.size else 0.0
    x = np.where(finite, x, 0.0)
    out: dict[str, Any] = {"channels": channels, "samples": length, "nonfinite_fraction": nonfinite_fraction}
    if sample_rate:
        out["seconds"] = length / float(sample_rate)
    if length == 0:
        out.update(rms_dbfs=DB_FLOOR, peak=0.0, peak_dbfs=DB_FLOOR, dc=0.0, silence_fraction=1.0,
                   clipping_fraction=0.0, channel_correlation=None, mono_energy_db=None)
        return out
    rms = math.sqrt(float(np.mean(x * x)))
    peak = float(np.abs(x).max())
    dc_per_channel = x.mean(axis=1)
    out["rms_dbfs"] = to_dbfs(rms)
    out["peak"] = peak
    out["peak_dbfs"] = to_dbfs(peak)
    out["dc"] = float(dc_per_channel[np.argmax(np.abs(dc_per_channel))])
    # Silence: share of short frames whose RMS (all channels together) is below SILENCE_DBFS.
    frame = max(1, int(round(_FRAME_SECONDS * sample_rate))) if sample_rate else 512
    n_frames = max(1, length // frame)
    usable = x[:, : n_frames * frame] if length >= frame else x
    frames = usable.reshape(channels, n_frames, -1)
    frame_rms = np.sqrt(np.mean(frames * frames, axis=(0, 2)))
    threshold = 10.0 ** (SILENCE_DBFS / 20.0)
    out["silence_fraction"] = float(np.mean(frame_rms < threshold))
    out["clipping_fraction"] = float(np.mean(np.abs(x) >= CLIP_LEVEL))
    if channels >= 2:
        cors = []
        for i in range(channels):
            for j in range(i + 1, channels):
                a, b = x[i] - x[i].mean(), x[j] - x[j].mean()
                denom = math.sqrt(float(a @ a) * float(b @ b))
                if denom > 0:
                    cors.append(float(a @ b) / denom)
        out["channel_correlation"] = float(np.mean(cors)) if cors else None
        mono = x.mean(axis=0)
        channel_energy = float(np.mean(x * x))
        mono_energy = float(np.mean(mono * mono))
        # 0 dB: channels identical; about -3 dB: unrelated; far below: they cancel in the downmix.
        out["mono_energy_db"] = (
            10.0 * math.log10(max(mono_energy, 1e-30) / channel_energy) if channel_energy > 0 else None
        )
    else:
        out["channel_correlation"] = None
        out["mono_energy_db"] = 0.0 if rms > 0 else None
    return out


def audio_summary(
    audio: np.ndarray, sample_rate: int | None = None, lengths: Sequence[int] | None = None
) -> dict[str, Any]:
    """Per-example audio summaries of a batch plus the batch-wide extremes.

    `lengths` (valid samples per example) keeps zero padding out of the level and silence figures.
    """
    batch = as_batch_audio(audio)
    examples = []
    for i in range(batch.shape[0]):
        x = batch[i]
        if lengths is not None and i < len(lengths):
            x = x[:, : int(lengths[i])]
        examples.append(audio_example_summary(x, sample_rate))
    out: dict[str, Any] = {"sample_rate": sample_rate, "batch": int(batch.shape[0])}
    if examples:
        out["rms_dbfs_min"] = min(e["rms_dbfs"] for e in examples)
        out["rms_dbfs_max"] = max(e["rms_dbfs"] for e in examples)
        out["peak"] = max(e["peak"] for e in examples)
        out["silence_fraction_max"] = max(e["silence_fraction"] for e in examples)
        out["clipping_fraction_max"] = max(e["clipping_fraction"] for e in examples)
        out["nonfinite_fraction_max"] = max(e["nonfinite_fraction"] for e in examples)
        out["dc_abs_max"] = max(abs(e["dc"]) for e in examples)
        mono = [e["mono_energy_db"] for e in examples if e.get("mono_energy_db") is not None]
        out["mono_energy_db_min"] = min(mono) if mono else None
    out["examples"] = examples
    return out


def text_summary(texts: str | Sequence[str]) -> dict[str, Any]:
    """Counts, lengths in characters and words, empties and duplicates of a list of strings."""
    items = [texts] if isinstance(texts, str) else [str(t) for t in texts]
    chars = [len(t) for t in items]
    words = [len(t.split()) for t in items]
    n = len(items)
    return {
        "count": n,
        "empty": sum(1 for t in items if not t.strip()),
        "unique": len(set(items)),
        "duplicates": n - len(set(items)),
        "chars_min": min(chars) if n else None,
        "chars_max": max(chars) if n else None,
        "chars_mean": float(np.mean(chars)) if n else None,
        "words_min": min(words) if n else None,
        "words_max": max(words) if n else None,
        "words_mean": float(np.mean(words)) if n else None,
        "hash": content_hash(items),
    }


def json_summary(value: Any) -> dict[str, Any]:
    """For metadata: how many records, which keys, and how many records miss each key."""
    records = value if isinstance(value, list) else [value]
    dicts = [r for r in records if isinstance(r, Mapping)]
    keys = sorted({str(k) for r in dicts for k in r})
    missing = {k: sum(1 for r in dicts if r.get(k) in (None, "", [], {})) for k in keys}
    return {
        "count": len(records),
        "keys": keys,
        "missing": {k: v for k, v in missing.items() if v},
        "hash": content_hash(value),
    }


def scalar_summary(value: float | int | bool) -> dict[str, Any]:
    v = float(value)
    return {
        "value": v if math.isfinite(v) else str(v),
        "finite": math.isfinite(v),
        "hash": content_hash(v if math.isfinite(v) else str(v)),
    }
