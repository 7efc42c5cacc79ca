"""Hostile inputs for the audit and listen tests: damaged WAV/FLAC bytes, special files, guards.

Every generator is deterministic (a seed or an explicit list), so a case that fails names itself
and fails the same way on every machine. `alarm` and `address_space` turn a hang or a runaway
allocation into a test failure instead of a stuck or killed machine.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16000
TRIED: Counter[str] = Counter()  # hostile cases tried per class, for the report and the floor asserts


def tone(seed: int, seconds: float = 1.5, sr: int = SR, channels: int = 1) -> np.ndarray:
    """A distinct decaying two-partial tone `[T, C]` per seed (float32, peak below 0.5)."""
    t = np.arange(int(seconds * sr)) / sr
    f = 180.0 + 37.0 * seed
    x = 0.3 * np.sin(2 * np.pi * f * t) + 0.1 * np.sin(2 * np.pi * 2.5 * f * t + seed)
    x = (x * np.exp(-0.7 * t)).astype(np.float32)
    return np.stack([x * (1.0 - 0.1 * c) for c in range(channels)], axis=1)


def encode(x: np.ndarray, sr: int = SR, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def chunk_at(raw: bytes, cid: bytes) -> int:
    """Offset of the size field of the first chunk `cid` in a RIFF file."""
    return raw.index(cid) + 4


def with_fmt(raw: bytes, *, rate: int | None = None, channels: int | None = None,
             block_align: int | None = None) -> bytes:
    """The WAV with fields of its fmt chunk replaced (byte rate left as it was: a liar's header)."""
    out = bytearray(raw)
    at = chunk_at(raw, b"fmt ") + 4
    if channels is not None:
        out[at + 2 : at + 4] = struct.pack("<H", channels & 0xFFFF)
    if rate is not None:
        out[at + 4 : at + 8] = struct.pack("<I", rate & 0xFFFFFFFF)
    if block_align is not None:
        out[at + 12 : at + 14] = struct.pack("<H", block_align & 0xFFFF)
    return bytes(out)


def with_size(raw: bytes, cid: bytes, size: int) -> bytes:
    """The WAV with the size field of chunk `cid` ("RIFF" or "data") set to `size`."""
    out = bytearray(raw)
    at = 4 if cid == b"RIFF" else chunk_at(raw, cid)
    out[at : at + 4] = struct.pack("<I", size & 0xFFFFFFFF)
    return bytes(out)


def header_flips(raw: bytes, seed: int, count: int, span: int = 64, name: str = "flip"
                 ) -> Iterator[tuple[str, bytes]]:
    """`count` copies of `raw`, each with 1-3 bytes of its first `span` bytes set to other values."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        out = bytearray(raw)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, min(span, len(raw))))
            out[pos] = int(rng.choice([0x00, 0xFF, 0x7F, 0x80, int(rng.integers(0, 256))]))
        yield f"{name}{i:03d}.wav", bytes(out)


def hostile_audio(seed: int = 0) -> dict[str, dict[str, bytes]]:
    """Damaged audio by class: {class: {file name: bytes}}. Every file of every class but
    `header_flips` (some flips are harmless) deserves a finding."""
    mono = encode(tone(seed))
    stereo_float = encode(tone(seed + 1, channels=2), subtype="FLOAT")
    flac = encode(tone(seed + 2), fmt="FLAC")
    n = len(mono)
    classes: dict[str, dict[str, bytes]] = {
        "absurd_rates": {f"rate{r}.wav": with_fmt(mono, rate=r) for r in (0, 1, 7, 999, 768_001, 2**31 - 1, 2**32 - 1)},
        "channel_counts": {f"ch{c}.wav": with_fmt(mono, channels=c, block_align=2 * c) for c in (0, 255, 1024, 65535)}
        | {"ch3.wav": encode(tone(seed + 3, channels=3)), "ch8.wav": encode(tone(seed + 4, channels=8))},
        "sizes": {"data_huge.wav": with_size(mono, b"data", n + 100_000_000),
                  "data_4gb.wav": with_size(mono, b"data", 0xFFFFFFFE),
                  "data_odd.wav": with_size(mono, b"data", n * 3 + 1),
                  "riff_and_data_huge.wav": with_size(with_size(mono, b"RIFF", 0xFFFFFFF0), b"data", 0xFFFFFF00),
                  "float_data_huge.wav": with_size(stereo_float, b"data", len(stereo_float) * 50)},
        "truncations": {f"cut{k:05d}.wav": mono[:k] for k in (1, 4, 8, 11, 12, 16, 20, 36, 40, 43, 44, 45, 47, 100,
                                                              1000, n // 3, n // 2, n - 3)}
        | {f"cut{k:05d}.flac": flac[:k] for k in (4, 10, 42, 100, len(flac) // 3, len(flac) // 2, len(flac) - 9)},
        "zero_length": {"empty.wav": b"", "empty.flac": b"", "empty.ogg": b""},
        "not_audio": {"text.wav": b"this is a caption, not audio\n" * 40, "zeros.wav": bytes(4096),
                      "random.flac": np.random.default_rng(seed).bytes(5000),
                      "png.wav": b"\x89PNG\r\n\x1a\n" + bytes(200), "json.mp3": b'{"path": "x.wav"}\n' * 30,
                      "riff_not_wave.wav": b"RIFF\x10\x00\x00\x00AVI LIST" + bytes(100),
                      "fake_flac.flac": b"fLaC" + bytes(300), "ogg_magic.ogg": b"OggS" + bytes(300)},
    }
    classes["header_flips"] = dict(header_flips(mono, seed, 60, name="flip_pcm")) | dict(
        header_flips(stereo_float, seed + 1, 30, span=80, name="flip_float"))
    return classes


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_socket(path: Path) -> Path:
    """A Unix socket file at `path` (left bound: the file stays)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()
    return path


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Fail with TimeoutError if the block runs longer than `seconds` (a hang guard, not a timing)."""

    def ring(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: something blocked")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def address_space(extra_bytes: int) -> Iterator[None]:
    """Let this process map at most `extra_bytes` more than it has now: an allocation planned
    from a header's claim fails with MemoryError instead of exhausting the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_bytes() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
