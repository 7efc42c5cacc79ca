"""Read the files a user hands the audit about their processing: normalisation statistics
(`--stats`) and the training sampler's index list (`--sampler`). No pickle: JSON, text, .npy/.npz
without object arrays, safetensors. A file that cannot be read is a clear error before any work."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .judge_leaks import FittedStats, SamplerEvidence
from .leakage import Entry

__all__ = ["read_stats", "read_sampler", "sampler_evidence"]

_MEAN = ("mean", "mu", "audio_mean", "wav_mean")
_STD = ("std", "sigma", "stddev", "audio_std", "wav_std")
_COUNT = ("count", "n", "num_samples", "n_samples", "samples", "num_items", "n_items", "clips")


def _arrays(path: Path) -> dict[str, Any]:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
            stack, flat = [data], {}
            while stack:  # the first mapping holding a mean wins (stats may be nested under a name)
                d = stack.pop(0)
                flat.update({k: v for k, v in d.items() if k not in flat and not isinstance(v, dict)})
                stack += [v for v in d.values() if isinstance(v, dict)]
            return flat
        if suffix == ".safetensors":
            from safetensors.numpy import load_file

            return dict(load_file(str(path)))
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
    except Exception as exc:
        raise UsageError(f"--stats {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    raise UsageError(f"--stats {path}: unsupported format {suffix!r}; use .json, .safetensors or .npz")


def _scalar(values: dict[str, Any], keys: Sequence[str], path: Path) -> float | None:
    for k in keys:
        if k in values:
            arr = np.asarray(values[k], dtype=np.float64).reshape(-1)
            if arr.size != 1:
                raise UsageError(f"--stats {path}: {k!r} holds {arr.size} values; the audit compares scalar "
                                 "waveform statistics (mean and std of the mono samples)")
            return float(arr[0])
    return None


def read_stats(path: str | Path) -> FittedStats:
    """Scalar mean/std (and optional count) of the waveform a pipeline normalises with."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--stats {path}: no such file")
    values = _arrays(p)
    mean, std = _scalar(values, _MEAN, p), _scalar(values, _STD, p)
    count = _scalar(values, _COUNT, p)
    if mean is None and std is None:
        raise UsageError(f"--stats {path}: no mean or std among its keys {sorted(values)[:12]}; "
                         f"name them one of {list(_MEAN)} / {list(_STD)}")
    return FittedStats(source=f"--stats {p.name}", mean=mean, std=std, count=None if count is None else int(count))


def read_sampler(path: str | Path) -> list[int] | list[str]:
    """Indices (ints) or example ids/paths (strings) the training sampler draws from."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--sampler {path}: no such file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            values: list[Any] = np.load(p, allow_pickle=False).reshape(-1).tolist()
        elif suffix == ".json":
            data = json.loads(p.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                data = next((data[k] for k in ("indices", "ids", "paths", "items", "train") if k in data), None)
            if not isinstance(data, list):
                raise ValueError("expected a list, or an object with 'indices', 'ids' or 'paths'")
            values = data
        else:
            values = [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"--sampler {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if all(isinstance(v, int) or (isinstance(v, str) and v.lstrip("-").isdigit()) for v in values):
        return [int(v) for v in values]
    return [str(v) for v in values]


def sampler_evidence(
    drawn: list[int] | list[str], entries: Sequence[Entry], train: str, source: str
) -> SamplerEvidence:
    """Which evaluation examples a sampler's list names: by index into the training split, or by
    path, file name, stem or source id."""
    train_size = sum(e.split == train for e in entries)
    ev = SamplerEvidence(source=source, drawn=len(drawn), train_size=train_size)
    if drawn and isinstance(drawn[0], int):
        ev.beyond = sorted({int(i) for i in drawn if int(i) >= train_size or int(i) < -train_size})
        return ev
    names: dict[str, set[str]] = {}
    for e in entries:
        for key in {e.ref, Path(e.ref).name, Path(e.ref).stem, e.source_id or ""} - {""}:
            names.setdefault(key, set()).add(e.split)
    for raw in drawn:
        key = str(raw)
        splits = names.get(key) or names.get(Path(key).name) or names.get(Path(key).stem) or set()
        for split in splits - {train}:
            if train not in splits:  # a name both sides use says nothing
                ev.hits.setdefault(split, []).append(key)
    return ev
