"""One audio file measured as a player reads it: the decode that never raises (`decode_file`,
shared by `listen`, the output family and the dataset audit) and the `FileMeasurement` of
`signalchain listen` and the output route (`measure_file`: header, subtype, level statistics,
denormal share, and float data re-read as 16-bit PCM when the header may lie).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SignalchainError
from ..records.output import FileMeasurement
from ..stats import audio_example_summary
from .io import AudioFile, read_audio

__all__ = ["decode_file", "measure_file", "wav_header"]


def decode_file(path: str | Path) -> tuple[AudioFile | None, str | None]:
    """`read_audio(path)`, or None and why it could not be read (the error's text after the file
    name, e.g. "unreadable audio (…)", "the file has 0 bytes"); never raises for a bad file."""
    try:
        return read_audio(path), None
    except SignalchainError as exc:
        return None, str(exc).split(": ", 1)[-1]


def wav_header(path: str | Path) -> dict[str, Any] | None:
    """The fmt and data chunks of a RIFF/WAVE file: what a player believes about its bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            out: dict[str, Any] = {}
            while True:
                chunk = f.read(8)
                if len(chunk) < 8:
                    return out or None
                cid, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
                if cid == b"fmt ":
                    fmt = f.read(size)
                    tag, ch, rate, _, align, bits = struct.unpack("<HHIIHH", fmt[:16])
                    out.update(format_tag=tag, channels=ch, rate=rate, block_align=align, bits=bits)
                elif cid == b"data":
                    out.update(data_offset=f.tell(), data_bytes=size)
                    return out
                else:
                    f.seek(size + (size & 1), 1)
    except (OSError, struct.error):
        return None


def _reread_as_pcm16(path: str | Path, header: dict[str, Any]) -> dict[str, Any]:
    """The data chunk read as interleaved 16-bit PCM: plausible audio means the header lied."""
    with open(path, "rb") as f:
        f.seek(header["data_offset"])
        raw = f.read(min(header["data_bytes"], 16_000_000))
    x = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0
    ch = max(1, int(header.get("channels", 1)))
    x = x[: len(x) // ch * ch].reshape(-1, ch).T
    s = audio_example_summary(x, header.get("rate"))
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
                          denormal_share=float((nonzero < 1e-30).mean()) if nonzero.size else 0.0)
    header = wav_header(path) if af.format == "WAV" else None
    if header and "data_offset" in header and header.get("format_tag") in (3, 0xFFFE) and header.get("bits") == 32:
        rep.reread = _reread_as_pcm16(path, header)
    return rep
