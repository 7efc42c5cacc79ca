"""Opening files someone else made: never block, never follow a loop, never trust a name.

A dataset folder can hold anything. A FIFO blocks the reader that opens it until a writer comes;
a device (/dev/zero) reads forever; a directory can be named `x.wav`; a symlink can loop or point
nowhere; a name can be bytes that are not UTF-8 (Python hands them over as lone surrogates, which
no UTF-8 writer accepts). Every reader of a user's file goes through here:

- `check_path` looks with `stat` only (it never opens), and says in words what is there;
- `open_regular` opens without blocking and confirms on the open descriptor that it is a regular
  file, so a swap between the look and the open cannot slip a FIFO through;
- `display_path` is the name as findings, terminals and JSON can carry it (undecodable bytes and
  control characters as `\\xNN`);
- `list_files` walks a folder (symlinked folders followed, each real folder once, loops named).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import SignalchainError

__all__ = ["PathState", "Listing", "check_path", "open_regular", "read_regular", "sha1_regular", "display_path",
           "has_surrogates", "without_surrogates", "list_files"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


@dataclass(frozen=True)
class PathState:
    """What `stat` says is at a path. `kind`: regular, missing, not_regular, loop or error."""

    kind: str
    detail: str = ""  # in words: "a FIFO (named pipe)", "a dangling symlink to x.wav", ...
    size: int = 0

    @property
    def regular(self) -> bool:
        return self.kind == "regular"


def has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (what a UTF-8 writer can hold)."""
    return _SURROGATE.sub("\ufffd", text)


def display_path(path: str | bytes | os.PathLike[str]) -> str:
    """The name shown to people and written to reports: bytes that are not UTF-8 and control
    characters become `\\xNN`, so one line stays one line and every writer accepts it."""
    text = os.fsdecode(path)
    if has_surrogates(text):
        try:
            text = os.fsencode(text).decode("utf-8", "backslashreplace")
        except UnicodeError:  # a surrogate no file system byte maps to (from a JSON escape)
            text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), f"a special file (mode {stat.S_IFMT(mode):#o})")


def check_path(path: str | bytes | os.PathLike[str]) -> PathState:
    """Look at `path` without opening it (symlinks followed)."""
    try:
        st = os.stat(path)
    except ValueError as exc:  # an embedded NUL, or a surrogate that no byte maps to
        return PathState("error", f"the name cannot be used as a file name ({exc})")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return PathState("loop", "a symlink loop (following the link leads back to it)")
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            if os.path.islink(path):
                try:
                    target = display_path(os.readlink(path))
                except OSError:
                    target = "?"
                return PathState("missing", f"a dangling symlink to {target}")
            return PathState("missing", "no such file")
        return PathState("error", f"cannot be looked at ({exc.strerror or type(exc).__name__})")
    if not stat.S_ISREG(st.st_mode):
        return PathState("not_regular", _kind_of(st.st_mode))
    return PathState("regular", "", int(st.st_size))


def open_regular(path: str | bytes | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file at `path` (the caller closes it).

    `SignalchainError` naming the file for anything else; a FIFO or device is never opened in a
    way that can block, and never read.
    """
    state = check_path(path)
    if not state.regular:
        raise SignalchainError(
            f"{display_path(path)}: {state.detail}, not a regular file"
            if state.kind == "not_regular"
            else f"{display_path(path)}: {state.detail}"
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        raise SignalchainError(
            f"{display_path(path)}: cannot be opened ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the look and the open
        os.close(fd)
        raise SignalchainError(f"{display_path(path)}: {_kind_of(mode)}, not a regular file")
    try:  # reads of a regular file never block; clear the flag so nothing downstream sees EAGAIN
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except (ImportError, OSError, AttributeError):
        pass
    return fd


def read_regular(path: str | bytes | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `SignalchainError` otherwise."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise SignalchainError(f"{display_path(path)}: larger than {limit:,} bytes")
    return data


def sha1_regular(path: str | bytes | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """sha1 of a regular file, read in chunks (memory stays flat on any size)."""
    fd = open_regular(path)
    h = hashlib.sha1()
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass
class Listing:
    """What `list_files` found: the files to read, and the symlink loops it did not follow."""

    files: list[str] = field(default_factory=list)  # sorted; real paths (a broken link: the link itself)
    loops: list[tuple[str, str]] = field(default_factory=list)  # (link, why)
    unlisted: list[tuple[str, str]] = field(default_factory=list)  # (folder, why it could not be listed)


def list_files(root: str | os.PathLike[str], suffixes: Sequence[str], resolve: bool = True) -> Listing:
    """Every entry under `root` whose name ends in one of `suffixes` (case-insensitive), whatever
    it is (regular file, FIFO, directory, broken link: the reader's `check_path` tells). Symlinked
    folders are followed, each real folder once; a link back into its own ancestry is a loop.
    Files are listed by their real paths, or (`resolve=False`) as found under `root`; each once."""
    ends = tuple(s.lower() for s in suffixes)
    out, seen_files, seen_dirs = Listing(), set(), set()
    top = os.fspath(root)
    try:
        st = os.stat(top)
    except (OSError, ValueError) as exc:
        out.unlisted.append((top, str(exc)))
        return out
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [(top, frozenset({(st.st_dev, st.st_ino)}))]
    seen_dirs.add((st.st_dev, st.st_ino))

    def add(path: str) -> None:
        # a link to a regular file is listed by its target (one file, one entry); anything else by
        # the entry itself, so the finding names what sits in the folder, not /dev/zero
        real = os.path.isfile(path)
        key = os.path.realpath(path) if real else os.path.abspath(path)
        if key not in seen_files:
            seen_files.add(key)
            out.files.append(key if resolve else path)

    while stack:
        folder, ancestors = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.unlisted.append((folder, exc.strerror or type(exc).__name__))
            continue
        for entry in entries:
            named = entry.name.lower().endswith(ends)
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError as exc:
                if named:  # a loop or a dangling link: the reader says which
                    add(entry.path)
                elif exc.errno == errno.ELOOP:
                    out.loops.append((entry.path, "a symlink loop"))
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if named:
                    add(entry.path)  # a folder named like a file: reported, and its contents walked too
                if key in ancestors:
                    out.loops.append((entry.path, f"a symlink back to {display_path(os.path.realpath(entry.path))}, "
                                                  "which holds it"))
                elif key not in seen_dirs:
                    seen_dirs.add(key)
                    stack.append((entry.path, ancestors | {key}))
            elif named:
                add(entry.path)
    out.files.sort()
    return out
