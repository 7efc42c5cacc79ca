"""What a WAV header claims about its data chunk, read from the header bytes alone.

libsndfile quietly trusts the file over the header: a data chunk that claims 100 MB more than the
file holds is read to the end of the file and reported at its real length. Other readers (and the
tools that wrote a manifest from the header) believe the claim, so the claim is read here, to be
set against what decodes. RIFF (little-endian), RIFX (big-endian) and RF64 (64-bit sizes in
`ds64`) are understood; anything else says nothing (None).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

__all__ = ["WavClaim", "wav_claim", "UNKNOWN_SIZES"]

#: Data sizes streaming writers put in a header before they know the length (ffmpeg, sox to a pipe).
UNKNOWN_SIZES = (0, 0xFFFFFFFF)
_PCM_LIKE = (1, 3, 6, 7, 0xFFFE)  # PCM, IEEE float, A-law, mu-law, extensible: block_align = one frame
_MAX_CHUNKS = 256  # a header walk never wanders through a whole file of garbage


@dataclass(frozen=True)
class WavClaim:
    format_tag: int
    channels: int
    sample_rate: int
    block_align: int
    data_offset: int
    data_bytes: int  # what the header says the data chunk holds
    bits: int = 0  # bits per sample the fmt chunk says
    container: bytes = b"RIFF"  # b"RIFF" (little-endian), b"RIFX" (big-endian) or b"RF64"

    @property
    def frames(self) -> int | None:
        """Frames the header claims, where a frame is one block (PCM and float data)."""
        if self.format_tag not in _PCM_LIKE or self.block_align <= 0 or self.data_bytes in UNKNOWN_SIZES:
            return None
        return self.data_bytes // self.block_align


def wav_claim(fd: int, size: int) -> WavClaim | None:
    """The fmt and data chunk claims of the WAV file open at `fd` (`size` bytes), or None."""
    head = os.pread(fd, 12, 0)
    if len(head) < 12 or head[8:12] != b"WAVE" or head[:4] not in (b"RIFF", b"RIFX", b"RF64"):
        return None
    end = ">" if head[:4] == b"RIFX" else "<"
    fmt: tuple[int, int, int, int, int] | None = None
    ds64_data: int | None = None
    at = 12
    for _ in range(_MAX_CHUNKS):
        chunk = os.pread(fd, 8, at)
        if len(chunk) < 8:
            return None
        cid, length = chunk[:4], struct.unpack(end + "I", chunk[4:])[0]
        body = at + 8
        if cid == b"ds64" and length >= 16:
            ds64_data = struct.unpack("<Q", os.pread(fd, 16, body)[8:16])[0]
        elif cid == b"fmt " and length >= 16:
            raw = os.pread(fd, 16, body)
            if len(raw) < 16:
                return None
            tag, channels, rate, _, align, bits = struct.unpack(end + "HHIIHH", raw)
            fmt = (tag, channels, rate, align, bits)
        elif cid == b"data":
            if fmt is None:
                return None
            claimed = ds64_data if (head[:4] == b"RF64" and length == 0xFFFFFFFF and ds64_data is not None) else length
            return WavClaim(fmt[0], fmt[1], fmt[2], fmt[3], body, int(claimed), bits=fmt[4], container=head[:4])
        at = body + length + (length & 1)
        if at >= size:
            return None
    return None
