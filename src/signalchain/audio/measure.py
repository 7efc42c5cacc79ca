"""One audio file measured as a player reads it: the decode that never raises (`decode_file`,
shared by `listen`, the output family and the dataset audit) and the `FileMeasurement` of
`signalchain listen` and the output route (`measure_file`: header, subtype, level statistics,
denormal share, samples beyond full scale, and float data re-read as 16-bit PCM when the header
may lie).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SignalchainError
from ..records.output import FileMeasurement
from ..stats import audio_example_summary
from ._files import open_regular
from ._riff import WavClaim, wav_claim
from .io import AudioFile, read_audio

__all__ = ["decode_file", "measure_file", "wav_header", "FULL_SCALE_STEP", "beyond_full_scale"]

#: One step of 16-bit PCM: a float sample further than this past ±1 is changed by a PCM_16 writer (clipped).
FULL_SCALE_STEP = 2.0**-15


def beyond_full_scale(x: np.ndarray) -> int:
    """How many finite samples of `x` lie past full scale by more than one 16-bit step."""
    with np.errstate(invalid="ignore"):
        a = np.abs(np.asarray(x, dtype=np.float64))
    return int(np.count_nonzero(np.isfinite(a) & (a > 1.0 + FULL_SCALE_STEP)))


def decode_file(path: str | Path) -> tuple[AudioFile | None, str | None]:
    """`read_audio(path)`, or None and why it could not be read (the error's text after the file
    name, e.g. "unreadable audio (…)", "the file has 0 bytes"); never raises for a bad file."""
    try:
        return read_audio(path), None
    except SignalchainError as exc:
        return None, str(exc).split(": ", 1)[-1]


def wav_header(path: str | Path) -> WavClaim | None:
    """What the RIFF/RIFX/RF64 header of the WAV file at `path` claims (None when it is not one,
    or cannot be opened): what a player believes about its bytes."""
    try:
        fd = open_regular(path)
    except SignalchainError:
        return None
    try:
        return wav_claim(fd, os.fstat(fd).st_size)
    except (OSError, struct.error):
        return None
    finally:
        os.close(fd)


def _reread_as_pcm16(path: str | Path, header: WavClaim) -> dict[str, Any]:
    """The data chunk read as interleaved 16-bit PCM: plausible audio means the header lied."""
    with open(path, "rb") as f:
        f.seek(header.data_offset)
        raw = f.read(min(header.data_bytes, 16_000_000))
    x = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0
    ch = max(1, int(header.channels))
    x = x[: len(x) // ch * ch].reshape(-1, ch).T
    s = audio_example_summary(x, header.sample_rate)
    plausible = bool(x.size) and s["rms_dbfs"] > -70 and s["clipping_fraction"] < 0.01
    return {"as": "PCM_16", "rms_dbfs": s["rms_dbfs"], "peak": s["peak"], "plausible": plausible}


def measure_file(path: str | Path) -> FileMeasurement:
    """Read `path` as a player would (soundfile) and summarise it; never raises."""
    af, why = decode_file(path)
    if af is None:
        return FileMeasurement(path=str(path), error=why)
    x = af.audio
    with np.errstate(invalid="ignore"):
        a = np.abs(x[np.isfinite(x)])
    nonzero = a[a > 0]
    rep = FileMeasurement(path=str(path), sample_rate=af.sample_rate, subtype=af.subtype, format=af.format,
                          channels=af.channels, frames=af.frames, stats=audio_example_summary(x, af.sample_rate),
                          denormal_share=float((nonzero < 1e-30).mean()) if nonzero.size else 0.0,
                          over_samples=int(np.count_nonzero(a > 1.0 + FULL_SCALE_STEP)))
    header = wav_header(path) if af.format == "WAV" else None
    # little-endian RIFF only: 16-bit PCM bytes under a 32-bit float header (a byte edit, a wrong writer flag)
    if header is not None and header.container == b"RIFF" and header.format_tag in (3, 0xFFFE) and header.bits == 32:
        rep.reread = _reread_as_pcm16(path, header)
    return rep
