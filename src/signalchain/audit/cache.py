"""The fingerprint cache: a re-run of an audit decodes only new or changed files.

One SQLite file (no pickle: scalars as JSON, arrays as raw little-endian bytes with their shape),
keyed by absolute path and validated by size, mtime and the fingerprint version. Transactions make
every write atomic; a damaged cache file is moved aside and rebuilt, never trusted. A damaged row
(scalars that do not validate, arrays of the wrong size or not finite) is a miss: that file is
measured again and its row rewritten, and `damaged_rows` counts them for the report.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from ..audio import fingerprint as fpmod
from ..audio.fingerprint import Fingerprint
from ..records.audit import Measure
from ..stats import CLIP_LEVEL, SILENCE_DBFS
from . import measure as measure_mod

__all__ = ["FingerprintCache", "default_cache_path", "file_key", "VERSION"]

#: Changes whenever what a cached measure means changes (the fingerprint's constants, and the levels
#: and frame length of the summary): old entries are then recomputed.
VERSION = (f"m2-r{fpmod.RATE}-n{fpmod.N_FFT}-h{fpmod.HOP}-b{fpmod.BANDS}-w{fpmod.WINDOW}/{fpmod.WINDOW_HOP}"
           f"-g{fpmod.GROUPS}x{fpmod.MOD_BINS}-db{fpmod.RANGE_DB}"
           f"-s{SILENCE_DBFS}-c{CLIP_LEVEL}-f{measure_mod._FRAME_SECONDS}")

_SCHEMA = """CREATE TABLE IF NOT EXISTS measures (
    path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, version TEXT, scalars TEXT,
    frames BLOB, frame_count INTEGER, windows BLOB, window_count INTEGER, seconds REAL)"""


class _Scalars(BaseModel):
    """What a row's `scalars` must hold to be trusted (every field of `Measure.scalars()`)."""

    model_config = ConfigDict(extra="forbid")

    problem: str | None
    sample_rate: int
    channels: int
    samples: int
    summary: dict[str, float | None]
    total: float
    total_sq: float
    audio_hash: str
    frames_claimed: int
    read_error: str | None


def _key(path: str) -> str | bytes:
    """The row key of a path: its text, or its bytes when the name is not UTF-8 (SQLite text must
    be; a BLOB key never equals a TEXT one, so the two cannot collide)."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path)


def default_cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "signalchain" / "audit-fingerprints.sqlite"


def file_key(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of a file, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    return int(st.st_size), int(st.st_mtime_ns)


class FingerprintCache:
    """Measures by file. `path=None` keeps a private temporary database for this run only."""

    def __init__(self, path: str | Path | None):
        self.note: str | None = None
        self.damaged_rows = 0  # rows found damaged (and measured again) by `get` in this run
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="signalchain-audit-")
            path = Path(self._tmp.name) / "cache.sqlite"
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._open(self.path)
        except (OSError, sqlite3.Error) as exc:  # unwritable or damaged: this run uses a private one
            self.note = f"fingerprint cache {self.path} unusable ({type(exc).__name__}: {exc}); using a temporary one"
            damaged = self.path
            if isinstance(exc, sqlite3.DatabaseError) and damaged.is_file():
                try:
                    damaged.replace(damaged.with_name(damaged.name + ".damaged"))
                    self.note += f"; the old file is kept as {damaged.name}.damaged"
                except OSError:
                    pass
            self._tmp = tempfile.TemporaryDirectory(prefix="signalchain-audit-")
            self.path = Path(self._tmp.name) / "cache.sqlite"
            self._db = self._open(self.path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(str(path), timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        db.execute("SELECT count(*) FROM measures").fetchone()  # a damaged file fails here
        return db

    def get(self, path: str, key: tuple[int, int]) -> Measure | None:
        """The cached measure (window vectors only; frames load on demand), if still valid."""
        row = self._db.execute("SELECT size, mtime_ns, version, scalars, windows, window_count, seconds, frame_count "
                               "FROM measures WHERE path = ?", (_key(path),)).fetchone()
        if row is None or (row[0], row[1]) != key or row[2] != VERSION:
            return None
        try:
            return self._measure(row)
        except (ValidationError, ValueError, TypeError, OverflowError):  # a damaged row: measured again
            self.damaged_rows += 1
            return None

    @staticmethod
    def _measure(row: tuple) -> Measure:
        m = Measure(**_Scalars.model_validate_json(row[3]).model_dump())
        if row[4] is not None:
            count = int(row[5])
            if not isinstance(row[4], bytes) or len(row[4]) != count * fpmod.DIM * 2 or count < 0:
                raise ValueError("window vectors of the wrong size")
            windows = np.frombuffer(row[4], dtype="<f2").astype(np.float32).reshape(count, fpmod.DIM)
            seconds = float(row[6])
            if not (np.isfinite(windows).all() and np.isfinite(seconds)):
                raise ValueError("non-finite window vectors")
            m.fp = Fingerprint(frames=None if not row[7] else np.zeros((0, 0), np.float16), windows=windows,
                               seconds=seconds)
        return m

    def put_many(self, entries: Iterable[tuple[str, tuple[int, int], Measure]]) -> None:
        rows = []
        for path, (size, mtime), m in entries:
            fp = m.fp
            frames = None if fp is None or fp.frames is None else np.ascontiguousarray(fp.frames, dtype="<f2")
            try:
                scalars = json.dumps(m.scalars(), allow_nan=False, default=float)
            except ValueError:  # non-finite statistics: measured again next time rather than stored wrong
                continue
            rows.append((_key(path), size, mtime, VERSION, scalars,
                         None if frames is None else frames.tobytes(), 0 if frames is None else frames.shape[1],
                         None if fp is None else np.ascontiguousarray(fp.windows, dtype="<f2").tobytes(),
                         0 if fp is None else len(fp.windows), 0.0 if fp is None else fp.seconds))
        with self._db:  # one transaction: all of these or none
            self._db.executemany("INSERT OR REPLACE INTO measures VALUES (?,?,?,?,?,?,?,?,?,?)", rows)

    def frames(self, path: str) -> np.ndarray | None:
        """The frame envelope `[BANDS, N]` stored for `path`, or None (none stored, or damaged)."""
        row = self._db.execute("SELECT frames, frame_count FROM measures WHERE path = ?", (_key(path),)).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            count = int(row[1])
            if not isinstance(row[0], bytes) or count < 0 or len(row[0]) != fpmod.BANDS * count * 2:
                raise ValueError("frames of the wrong size")
            frames = np.frombuffer(row[0], dtype="<f2").reshape(fpmod.BANDS, count)
        except (ValueError, TypeError, OverflowError):
            self.damaged_rows += 1
            return None
        return frames if np.isfinite(frames).all() else None

    def close(self) -> None:
        self._db.close()
        if self._tmp is not None:
            self._tmp.cleanup()
