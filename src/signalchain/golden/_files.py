"""Reading a golden folder as data: real files only, no symlinks, no pickles, nothing that blocks.

Every file is opened once, without following a symlink and without blocking (a FIFO planted as
`values.safetensors` must not hang the loader), checked to be a regular file, and read whole; the
bytes that are hashed are the bytes that are parsed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .._atomic import previous_dir
from ..errors import GoldenFileError

__all__ = ["MANIFEST", "VALUES", "AUDIO_DIR", "golden_folder", "refuse_links", "read_file", "refuse_code"]

MANIFEST = "manifest.json"
VALUES = "values.safetensors"
AUDIO_DIR = "audio"
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's archive format, which holds pickles


def _named(path: str | Path) -> Path:
    """`.` and `..` have no name to put `.previous` after: use the absolute folder."""
    path = Path(path)
    return path.absolute().resolve() if path.name in ("", ".", "..") else path


def golden_folder(path: str | Path) -> Path:
    """The folder to read: `path`, or `path.previous` when a save was interrupted between its renames."""
    folder = _named(path)
    if not os.path.lexists(folder):
        prev = previous_dir(folder)
        if os.path.lexists(prev):
            folder = prev
        else:
            raise GoldenFileError(f"{folder}: no golden batch here (expected a folder made by `signalchain capture`)")
    if os.path.islink(folder):
        raise GoldenFileError(f"{folder}: is a symbolic link; a golden batch must be a real folder, not a link to one")
    if not folder.is_dir():
        raise GoldenFileError(f"{folder}: is not a folder; a golden batch is a folder made by `signalchain capture`")
    return folder


def refuse_links(folder: Path) -> None:
    """No entry of the golden folder (or of its audio/ folder) may be a symlink."""
    for sub in (folder, folder / AUDIO_DIR):
        if sub is not folder and not os.path.lexists(sub):
            continue
        if sub is not folder and os.path.islink(sub):
            raise GoldenFileError(f"{sub}: is a symbolic link; a golden batch holds real files only")
        if not sub.is_dir():
            continue
        try:
            entries = list(os.scandir(sub))
        except OSError as exc:
            raise GoldenFileError(f"{sub}: cannot be listed ({exc.strerror})") from None
        for entry in entries:
            if entry.is_symlink():
                raise GoldenFileError(f"{Path(entry.path)}: is a symbolic link; a golden batch holds real "
                                      "files only (a link could point anywhere)")


def read_file(path: Path, what: str, limit: int | None = None) -> bytes:
    """The whole content of a regular file, opened without following links or blocking."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise GoldenFileError(f"{path}: {what}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GoldenFileError(f"{path}: is a symbolic link; a golden batch holds real files only") from None
        raise GoldenFileError(f"{path}: cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe or a device)"
            raise GoldenFileError(f"{path}: is {kind}; a golden batch holds regular files only")
        if limit is not None and info.st_size > limit:
            raise GoldenFileError(f"{path}: is {info.st_size} bytes, more than the {limit} a golden file may hold")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise GoldenFileError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def refuse_code(path: Path, head: bytes) -> None:
    """Pickles and torch archives are refused by their first bytes, before anything parses them."""
    if head[:2] in _PICKLE_MAGIC or head[:4] == _ZIP_MAGIC:
        raise GoldenFileError(f"{path}: holds a pickle (or a torch.save archive); signalchain never unpickles - "
                              "a golden holds JSON, safetensors and WAV only")
