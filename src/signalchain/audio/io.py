"""Safe audio file reading and writing. Errors name the file and what is wrong with it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from .._atomic import atomic_file
from ..errors import SignalchainError
from ._files import display_path, open_regular
from ._riff import wav_claim

__all__ = ["AudioFile", "read_audio", "claimed_frames", "write_audio", "join_examples", "BLOCK_SAMPLES",
           "MAX_SAMPLES_PER_BYTE"]


#: Samples decoded per read (all channels together): what one read allocates, whatever the header says.
BLOCK_SAMPLES = 1 << 18
#: The most samples any codec libsndfile reads makes of one byte (PCM_U8: 1; ADPCM: 2; GSM: ~5).
MAX_SAMPLES_PER_BYTE = 8
_SMALL_READ = 1024  # frames per read once a decoder has failed: as much as possible before the damage
#: Formats whose frame count is the decoder's estimate (MPEG without a seek table): a shortfall
#: this small is no truncation.
_ESTIMATED = {"MP3": 0.01, "MPEG": 0.01, "OGG": 0.001}


@dataclass
class AudioFile:
    """Decoded audio `[C, T]` (float32) and what the file header says.

    `frames` is what decoded; `frames_claimed` is set when the header claims more than that (a
    file cut short, or a header that lies), and `read_error` says why decoding stopped early.
    """

    path: str
    audio: np.ndarray
    sample_rate: int
    subtype: str
    format: str
    frames: int
    frames_claimed: int | None = None
    read_error: str | None = None

    @property
    def channels(self) -> int:
        return int(self.audio.shape[0])

    @property
    def truncated(self) -> bool:
        return self.frames_claimed is not None and self.frames_claimed > self.frames


def _why(exc: BaseException) -> str:
    """A decoder's complaint without the descriptor number soundfile puts in it."""
    text = re.sub(r"^Error opening \d+: ", "", str(exc).strip())
    return f"{type(exc).__name__}: {text[:200]}"


def _decode(f: sf.SoundFile, size: int) -> tuple[np.ndarray, str | None]:
    """Every frame that decodes, `[T, C]`. Memory follows what the file holds, never the frame
    count its header claims: the first read asks for the header's count only up to what `size`
    bytes can hold (MAX_SAMPLES_PER_BYTE), the rest comes block by block while frames decode. A
    decoder error after some frames keeps them (the failing part is read again in small steps,
    to keep what precedes the damage)."""
    channels = max(1, f.channels)
    per_read = max(1, BLOCK_SAMPLES // channels)
    first = max(per_read, min(max(int(f.frames), 0), size * MAX_SAMPLES_PER_BYTE // channels))
    blocks: list[np.ndarray] = []
    done, error = 0, None
    while True:
        want = first if not blocks and error is None else per_read
        try:
            block = f.read(want, dtype="float32", always_2d=True)
        except Exception as exc:  # a decoder that loses sync mid-file: what came before counts
            error = error or _why(exc)
            if per_read <= _SMALL_READ:
                break
            try:
                f.seek(done)
            except Exception:
                break
            per_read = _SMALL_READ
            continue
        if not len(block):
            break
        if len(block) < want // 2:  # a short read views a larger allocation: keep only what decoded
            block = block.copy()
        blocks.append(block)
        done += len(block)
    if not blocks:
        return np.zeros((0, channels), np.float32), error
    return (blocks[0] if len(blocks) == 1 else np.concatenate(blocks)), error


def _claimed(fd: int, size: int, info_frames: int, fmt: str, decoded: int) -> int | None:
    """The frame count the header claims, when it is more than decoded (None otherwise)."""
    claim = max(info_frames, 0)
    if fmt == "WAV":
        wav = wav_claim(fd, size)
        if wav is not None and wav.frames is not None:
            claim = max(claim, wav.frames)
    slack = _ESTIMATED.get(fmt, 0.0) * claim + (1152 if fmt in ("MP3", "MPEG") else 0)
    return claim if claim > decoded + slack else None


def claimed_frames(path: str | Path, decoded: int) -> int | None:
    """The frame count the header of `path` claims, when it is more than `decoded` (None when it
    is not, or the file cannot be looked at). Reads the header only."""
    try:
        fd = open_regular(path)
    except SignalchainError:
        return None
    try:
        with sf.SoundFile(fd, closefd=False) as f:
            frames, fmt = int(f.frames), f.format
        return _claimed(fd, os.fstat(fd).st_size, frames, fmt, decoded)
    except Exception:  # not audio at all: nothing is claimed
        return None
    finally:
        os.close(fd)


def read_audio(path: str | Path) -> AudioFile:
    """Read any soundfile-supported file as float32 `[C, T]`; raise `SignalchainError` naming the file.

    Only regular files are opened (a FIFO or device never is); what decodes is returned even when
    the header claims more (`AudioFile.truncated`).
    """
    shown = display_path(path)
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise SignalchainError(f"{shown}: the file has 0 bytes")
        try:
            with sf.SoundFile(fd, closefd=False) as f:
                rate, fmt, subtype, info_frames = int(f.samplerate), f.format, f.subtype, int(f.frames)
                if rate <= 0 or f.channels <= 0:
                    raise SignalchainError(f"{shown}: the header says {rate} Hz and {f.channels} channels")
                data, error = _decode(f, size)
        except SignalchainError:
            raise
        except Exception as exc:
            raise SignalchainError(f"{shown}: unreadable audio ({_why(exc)})") from None
        if error is not None and not len(data):
            raise SignalchainError(f"{shown}: unreadable audio ({error})")
        claimed = _claimed(fd, size, info_frames, fmt, len(data))
    finally:
        os.close(fd)
    return AudioFile(
        os.fsdecode(path), np.ascontiguousarray(data.T), rate, subtype, fmt, int(len(data)), claimed, error
    )


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
