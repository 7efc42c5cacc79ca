"""Where a golden may be written, and how a new one replaces the old with one complete golden at
every instant.

The new golden is written into a temporary sibling `.<name>.XXXXXXXX.tmp` and swapped in by
renames only (each atomic on POSIX):

    1. a leftover `<name>.previous` (there is a current `<name>`) is renamed to a temporary name
    2. `<name>` → `<name>.previous`       (readers fall back to `.previous` while `<name>` is absent)
    3. temporary → `<name>`
    4. `<name>.previous` → a temporary name, then removed

Nothing is deleted before it has been renamed out of a reader's way, so a kill at any step leaves
a complete golden at `<name>` or `<name>.previous`. The next save removes the temporary folders an
interrupted one left (only folders matching that exact pattern for that name).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .._atomic import previous_dir
from ..errors import GoldenFileError, UsageError
from ._files import AUDIO_DIR, MANIFEST, TOLERANCES

__all__ = ["check_target", "sweep_stale", "make_temp", "swap_in", "fsync_tree", "temp_pattern"]

_REPORT = "report.html"  # the optional page a golden may carry (DESIGN §5)


def temp_pattern(name: str) -> re.Pattern[str]:
    """Names `tempfile.mkdtemp(prefix=f'.{name}.', suffix='.tmp')` makes: 8 characters of its alphabet."""
    return re.compile(rf"^\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp$")


def _golden_manifest(folder: Path) -> tuple[dict | None, str]:
    """The manifest when `folder` holds a signalchain golden (this version or version 1), else why not."""
    from .schema import parse_manifest, validate_manifest

    mpath = folder / MANIFEST
    if os.path.islink(mpath) or not mpath.is_file():
        return None, f"it has no {MANIFEST}"
    try:
        raw = mpath.read_bytes()
        obj = parse_manifest(raw, mpath)
        validate_manifest(obj, mpath)
        return obj, ""
    except GoldenFileError as exc:
        reason = str(exc).removeprefix(f"{mpath}: ")
    except OSError as exc:
        return None, f"its {MANIFEST} cannot be read ({exc.strerror})"
    try:  # a version-1 golden (no self-checksum) may be re-captured over
        old = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeError):
        old = None
    ok = (isinstance(old, dict) and old.get("schema") == "signalchain.golden" and type(old.get("schema_version")) is int
          and old["schema_version"] == 1 and isinstance(old.get("files"), dict))
    return (old, "") if ok else (None, f"its {MANIFEST} {reason[:200]}")


def _foreign_entries(folder: Path, manifest: dict) -> list[str]:
    """What a replacement would delete that is not part of the golden itself."""
    listed = {str(k) for k in manifest.get("files", {})}
    foreign = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        rel = entry.name
        if entry.is_symlink():
            foreign.append(rel)
        elif rel == AUDIO_DIR and entry.is_dir(follow_symlinks=False):
            for sub in sorted(os.scandir(entry.path), key=lambda e: e.name):
                if sub.is_symlink() or f"{AUDIO_DIR}/{sub.name}" not in listed:
                    foreign.append(f"{AUDIO_DIR}/{sub.name}")
        elif rel not in listed and rel not in (MANIFEST, _REPORT, TOLERANCES):
            foreign.append(rel)
    return foreign


def _check_replaceable(folder: Path, role: str) -> None:
    if os.path.islink(folder):
        raise UsageError(f"{folder}: {role} is a symbolic link; give the real folder to write the golden into")
    if not folder.is_dir():
        raise UsageError(f"{folder}: {role} is a file, not a folder; a golden batch is written into a folder")
    try:
        entries = sorted(e.name for e in os.scandir(folder))
    except OSError as exc:
        raise UsageError(f"{folder}: {role} cannot be listed ({exc.strerror})") from None
    if not entries:
        return
    manifest, why = _golden_manifest(folder)
    if manifest is None:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise UsageError(f"{folder}: {role} is not empty and not a golden batch ({why}); capture would delete "
                         f"what it holds ({shown}) - choose a missing or empty folder, or an existing golden")
    foreign = _foreign_entries(folder, manifest)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UsageError(f"{folder}: {role} is a golden batch but also holds {shown}, which capture would delete; "
                         "move them out first")


def check_target(path: str | Path) -> Path:
    """`path` if a golden may be written there: a missing or empty folder, or an existing golden."""
    raw = Path(path)
    if raw.name in ("", ".", ".."):
        raise UsageError(f"--out {str(path)!r} names the current folder or one above it; name a folder for the "
                         "golden, e.g. --out golden")
    here = Path.cwd().resolve()
    absolute = raw.absolute()
    if absolute == here or absolute in here.parents or raw.resolve() == here or raw.resolve() in here.parents:
        raise UsageError(f"--out {str(path)!r} is the current folder or one above it; name a folder for the golden")
    if os.path.lexists(raw):
        _check_replaceable(raw, "the output folder")
    prev = previous_dir(raw)
    if os.path.lexists(prev):
        _check_replaceable(prev, f"{prev.name} (where the earlier version waits during a save)")
    parent = raw.parent
    if os.path.lexists(parent) and not parent.is_dir():
        raise UsageError(f"{raw}: cannot write a golden here: {parent} is not a folder")
    return raw


def sweep_stale(path: Path) -> list[Path]:
    """Remove the temporary folders an interrupted save of `path` left beside it (real folders only)."""
    pattern, removed = temp_pattern(path.name), []
    parent = path.parent
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if pattern.match(entry.name) and not entry.is_symlink() and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def make_temp(path: Path) -> Path:
    """A fresh temporary folder beside `path`; an unwritable place is a usage error, not a crash."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write a golden here ({exc.strerror or exc}); choose a folder you can "
                         "write to") from None
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)
    return tmp


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under `folder` to disk before it is renamed into place."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(root))


def _discard(folder: Path) -> None:
    """Rename `folder` to a temporary name first, so a half-finished removal is never read."""
    grave = Path(tempfile.mkdtemp(prefix=f".{folder.name.removesuffix('.previous')}.", suffix=".tmp",
                                  dir=folder.parent))
    os.replace(folder, grave)
    shutil.rmtree(grave, ignore_errors=True)


def swap_in(tmp: Path, path: Path) -> None:
    """Put the complete golden `tmp` at `path`; see the module docstring for the order of renames."""
    prev = previous_dir(path)
    current = os.path.lexists(path)
    if current and os.path.lexists(prev):
        _discard(prev)  # a leftover of an earlier interrupted save; `path` is complete
    if current:
        os.replace(path, prev)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    try:  # the new golden is in place: what is left is tidying, which the next save redoes if cut short
        if os.path.lexists(prev):
            _discard(prev)
        _fsync_dir(path.parent)
    except OSError:
        pass
