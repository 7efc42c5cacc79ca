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

__all__ = ["MANIFEST", "VALUES", "AUDIO_DIR", "TOLERANCES", "GoldenDir", "golden_folder", "refuse_code"]

MANIFEST = "manifest.json"
VALUES = "values.safetensors"
AUDIO_DIR = "audio"
TOLERANCES = "tolerances.json"  # suggested tolerances beside the golden (tolerance_file.py), not in the manifest
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
            raise GoldenFileError(f"{folder}: no such file or folder: no golden batch here (expected a folder made by "
                                  "`signalchain capture`)")
    if os.path.islink(folder):
        raise GoldenFileError(f"{folder}: is a symbolic link; a golden batch must be a real folder, not a link to one")
    if not folder.is_dir():
        raise GoldenFileError(f"{folder}: is not a folder; a golden batch is a folder made by `signalchain capture`")
    return folder


class GoldenDir:
    """A golden folder held open by descriptor. Every read is relative to the folder as it was when
    opened, so a save that swaps a new golden in meanwhile cannot mix two versions; `swapped()`
    says whether that happened (the loader then reads again, from the new one)."""

    def __init__(self, path: Path):
        self.path = path
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            self.fd = os.open(path, flags)
        except OSError as exc:
            raise _open_error(path, exc, "a golden batch must be a real folder, not a link to one") from None
        self._audio: int | None = None

    def __enter__(self) -> GoldenDir:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (self._audio, self.fd):
            if fd is not None:
                os.close(fd)

    def swapped(self) -> bool:
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (os.fstat(self.fd).st_dev, os.fstat(self.fd).st_ino)

    def _audio_fd(self) -> int:
        if self._audio is None:
            flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
            try:
                self._audio = os.open(AUDIO_DIR, flags, dir_fd=self.fd)
            except OSError as exc:
                raise _open_error(self.path / AUDIO_DIR, exc, "a golden batch holds real files only") from None
        return self._audio

    def refuse_links(self) -> None:
        """No entry of the golden folder (or of its audio/ folder) may be a symlink."""
        for entry in _entries(self.fd, self.path):
            if entry.is_symlink():
                raise GoldenFileError(f"{self.path / entry.name}: is a symbolic link; a golden batch holds real "
                                      "files only (a link could point anywhere)")
            if entry.name == AUDIO_DIR and entry.is_dir(follow_symlinks=False):
                for sub in _entries(self._audio_fd(), self.path / AUDIO_DIR):
                    if sub.is_symlink():
                        raise GoldenFileError(f"{self.path / AUDIO_DIR / sub.name}: is a symbolic link; a golden "
                                              "batch holds real files only (a link could point anywhere)")

    def read(self, rel: str, what: str, limit: int | None = None) -> bytes:
        """The whole content of the regular file `rel` (`name` or `audio/name`), opened without
        following links or blocking."""
        path = self.path / rel
        head, _, name = rel.rpartition("/")
        dir_fd = self._audio_fd() if head == AUDIO_DIR else self.fd
        if head not in ("", AUDIO_DIR):
            raise GoldenFileError(f"{path}: is not a file of a golden batch")
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
        except FileNotFoundError:
            raise GoldenFileError(f"{path}: {what}") from None
        except OSError as exc:
            raise _open_error(path, exc, "a golden batch holds real files only") from None
        try:
            return _read_regular(fd, path, limit)
        finally:
            os.close(fd)


def _open_error(path: Path, exc: OSError, link_hint: str) -> GoldenFileError:
    if exc.errno == errno.ELOOP:
        return GoldenFileError(f"{path}: is a symbolic link; {link_hint}")
    if exc.errno == errno.ENOTDIR:
        return GoldenFileError(f"{path}: is not a folder; a golden batch is a folder made by `signalchain capture`")
    if exc.errno == errno.ENOENT:
        return GoldenFileError(f"{path}: no such file or folder: no golden batch here (expected a folder made by "
                                "`signalchain capture`)")
    return GoldenFileError(f"{path}: cannot be opened ({exc.strerror})")


def _entries(fd: int, where: Path) -> list[os.DirEntry]:
    try:
        return list(os.scandir(fd))
    except OSError as exc:
        raise GoldenFileError(f"{where}: cannot be listed ({exc.strerror})") from None


def _read_regular(fd: int, path: Path, limit: int | None) -> bytes:
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


def refuse_code(path: Path, head: bytes) -> None:
    """Pickles and torch archives are refused by their first bytes, before anything parses them. A
    safetensors file starts with its header's length (8 bytes, little-endian) and then the header's `{`:
    a length of 0x280, 0x380, … begins like a pickle, so `head` holds 9 bytes to tell them apart."""
    if head[8:9] == b"{":  # a safetensors header (or a manifest's JSON): parsed, never unpickled
        return
    if head[:2] in _PICKLE_MAGIC or head[:4] == _ZIP_MAGIC:
        raise GoldenFileError(f"{path}: holds a pickle (or a torch.save archive); signalchain never unpickles - "
                              "a golden holds JSON, safetensors and WAV only")
