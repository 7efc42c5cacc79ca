"""Safe audio file reading and writing. Errors name the file and what is wrong with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from .._atomic import atomic_file
from ..errors import SignalchainError

__all__ = ["AudioFile", "read_audio", "write_audio", "join_examples"]


@dataclass
class AudioFile:
    """Decoded audio `[C, T]` (float32) and what the file header says."""

    path: str
    audio: np.ndarray
    sample_rate: int
    subtype: str
    format: str
    frames: int

    @property
    def channels(self) -> int:
        return int(self.audio.shape[0])


def read_audio(path: str | Path) -> AudioFile:
    """Read any soundfile-supported file as float32 `[C, T]`; raise `SignalchainError` naming the file."""
    path = Path(path)
    if not path.exists():
        raise SignalchainError(f"{path}: no such audio file")
    try:
        info = sf.info(str(path))
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:
        raise SignalchainError(f"{path}: unreadable audio ({type(exc).__name__}: {exc})") from None
    return AudioFile(str(path), np.ascontiguousarray(data.T), int(sr), info.subtype, info.format, int(info.frames))


def write_audio(path: str | Path, audio: np.ndarray, sample_rate: int, subtype: str = "FLOAT") -> Path:
    """Atomically write `[C, T]` or `[T]` audio. Non-finite samples are written as 0.

    FLOAT keeps values beyond full scale, so that a scale fault stays audible and measurable.
    """
    path = Path(path)
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 1:
        audio = audio[None]
    if audio.ndim != 2:
        raise SignalchainError(f"{path}: audio to write must be [C, T]; got shape {audio.shape}")
    audio = np.where(np.isfinite(audio), audio, 0.0).astype(np.float32)
    fmt = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG"}.get(path.suffix.lower(), "WAV")
    with atomic_file(path, suffix=path.suffix) as tmp:
        sf.write(str(tmp), audio.T, int(sample_rate), subtype=subtype, format=fmt)
    return path


def join_examples(batch: np.ndarray, sample_rate: int, gap_seconds: float = 0.25) -> tuple[np.ndarray, list[list[int]]]:
    """Lay a batch `[B, C, T]` end to end with short gaps, for listening. Returns audio and segments."""
    batch = np.asarray(batch, dtype=np.float32)
    b, c, t = batch.shape
    gap = int(round(gap_seconds * sample_rate))
    out = np.zeros((c, b * t + max(b - 1, 0) * gap), dtype=np.float32)
    segments = []
    for i in range(b):
        start = i * (t + gap)
        out[:, start : start + t] = batch[i]
        segments.append([start, start + t])
    return out, segments
