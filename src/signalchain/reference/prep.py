"""Data preparation, the way a music training loader does it: batch, resample, downmix, crop, mask.

Plain numpy on `[B, C, T]` arrays. Each function is one boundary of the golden batch.
"""

from __future__ import annotations

import math

import numpy as np
import soxr

__all__ = ["collate", "resample", "to_mono", "choose_crops", "apply_crops", "padding_mask"]


def collate(clips: list[np.ndarray], channels: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Stack clips `[C_i, T_i]` into `[B, channels, T_max]`, zero-padded; mono is repeated to stereo.

    Returns the batch and the valid length of each clip in samples.
    """
    lengths = np.array([c.shape[-1] for c in clips], dtype=np.int64)
    out = np.zeros((len(clips), channels, int(lengths.max(initial=0))), dtype=np.float32)
    for i, c in enumerate(clips):
        c = c if c.shape[0] == channels else np.repeat(c[:1], channels, axis=0)
        out[i, :, : c.shape[-1]] = c
    return out, lengths


def resample(audio: np.ndarray, lengths: np.ndarray, sr_in: int, sr_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Resample the valid part of each example with soxr (high quality). [B, C, T] -> [B, C, T']."""
    if sr_in == sr_out:
        return audio.copy(), lengths.copy()
    parts = [soxr.resample(audio[i, :, : lengths[i]].T, sr_in, sr_out).T for i in range(audio.shape[0])]
    new_lengths = np.array([p.shape[-1] for p in parts], dtype=np.int64)
    out = np.zeros((audio.shape[0], audio.shape[1], int(new_lengths.max(initial=0))), dtype=np.float32)
    for i, p in enumerate(parts):
        out[i, :, : p.shape[-1]] = p
    return out, new_lengths


def to_mono(audio: np.ndarray) -> np.ndarray:
    """Average the channels. [B, C, T] -> [B, 1, T]."""
    return audio.mean(axis=1, keepdims=True)


def choose_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
    """A random window of `segment` samples inside each clip; clips shorter than it start at 0.

    Returns bounds `[B, 2]` (start, end) in samples.
    """
    room = np.maximum(lengths - segment, 0)
    starts = np.array([rng.integers(0, r + 1) for r in room], dtype=np.int64)
    return np.stack([starts, starts + segment], axis=1)


def apply_crops(audio: np.ndarray, bounds: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cut each window, zero-padding past the clip's end. Returns `[B, C, S]` and valid samples per row."""
    b, c, _ = audio.shape
    segment = int(bounds[0, 1] - bounds[0, 0])
    out = np.zeros((b, c, segment), dtype=np.float32)
    valid = np.zeros(b, dtype=np.int64)
    for i in range(b):
        start, end = int(bounds[i, 0]), int(min(bounds[i, 1], lengths[i]))
        n = max(end - start, 0)
        out[i, :, :n] = audio[i, :, start : start + n]
        valid[i] = n
    return out, valid


def padding_mask(valid_samples: np.ndarray, hop: int, frames: int) -> np.ndarray:
    """[B, F] bool: a frame is valid when any of its samples is real audio."""
    n_valid = np.array([math.ceil(v / hop) for v in valid_samples], dtype=np.int64)
    return np.arange(frames)[None, :] < n_valid[:, None]
