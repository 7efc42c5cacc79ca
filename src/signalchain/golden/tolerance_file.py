"""`tolerances.json`: suggested tolerances kept beside a golden's files, as data, read strictly.

    {"schema": "signalchain.tolerances", "schema_version": 1, "runs": 5, "margin": 10.0,
     "stages": {"logits": {"rtol": 1.3e-05, "atol": 0.0001}}}

It is not covered by the manifest's checksum: it is a reviewed setting (like a `--tol` option),
hand-editable, and loosening it shows in the diff of the pull request. Reading refuses, with a
`GoldenFileError` naming the file and the field: a symlink or non-regular file, more than 1 MiB,
anything but strict JSON (NaN, duplicate keys), an unknown or missing field, a wrong type, a
tolerance that is negative or not finite, a stage the golden lacks or compares exactly.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._atomic import write_text_atomic
from ..errors import GoldenFileError, UsageError
from ..trace import Trace
from ._files import TOLERANCES
from .compare import Tolerance
from .schema import _DuplicateKey, strict_loads
from .tolerances import resolve_tolerances

__all__ = ["TOLERANCES", "TOLERANCES_SCHEMA", "read_tolerances", "write_tolerances"]

TOLERANCES_SCHEMA = "signalchain.tolerances"
_VERSION = 1
_MAX_BYTES = 1 << 20
_FIELDS = ("schema", "schema_version", "runs", "margin", "stages")


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _read_bytes(path: Path) -> bytes:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise GoldenFileError(f"{path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise GoldenFileError(f"{path}: is not a regular file (a symlink, folder or device); tolerances are a "
                              "small JSON file written by --signalchain-suggest")
    if st.st_size > _MAX_BYTES:
        raise GoldenFileError(f"{path}: is {st.st_size} bytes, more than a tolerances file may hold ({_MAX_BYTES})")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read(_MAX_BYTES + 1)


def _parse(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        obj = strict_loads(raw)
    except _DuplicateKey as exc:
        raise GoldenFileError(f"{path}: is not valid JSON (key {str(exc)!r} appears twice in one object)") from None
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise GoldenFileError(f"{path}: is not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(obj, dict):
        raise GoldenFileError(f"{path}: is a JSON {type(obj).__name__}, expected an object with fields "
                              f"{', '.join(_FIELDS)}")
    for name in obj:
        if name not in _FIELDS:
            raise GoldenFileError(f"{path}: field {name!r} is unknown; a tolerances file has {', '.join(_FIELDS)}")
    for name in _FIELDS:
        if name not in obj:
            raise GoldenFileError(f"{path}: field {name!r} is missing")
    if obj["schema"] != TOLERANCES_SCHEMA:
        raise GoldenFileError(f"{path}: field schema is {obj['schema']!r}, expected {TOLERANCES_SCHEMA!r}")
    if type(obj["schema_version"]) is not int or obj["schema_version"] != _VERSION:
        raise GoldenFileError(f"{path}: field schema_version is {obj['schema_version']!r}, expected {_VERSION}")
    if type(obj["runs"]) is not int or obj["runs"] < 2:
        raise GoldenFileError(f"{path}: field runs is {obj['runs']!r}, expected an integer >= 2")
    if not _number(obj["margin"]) or obj["margin"] < 1:
        raise GoldenFileError(f"{path}: field margin is {obj['margin']!r}, expected a finite number >= 1")
    if not isinstance(obj["stages"], dict):
        raise GoldenFileError(f"{path}: field stages is a {type(obj['stages']).__name__}, expected an object "
                              "mapping stage names to {\"rtol\": …, \"atol\": …}")
    return obj


def _stages(stages: dict[str, Any], path: Path) -> dict[str, Tolerance]:
    out = {}
    for stage, entry in stages.items():
        where = f"field stages.{stage}"
        if not isinstance(entry, dict) or sorted(entry) != ["atol", "rtol"]:
            raise GoldenFileError(f"{path}: {where} is {json.dumps(entry)[:120]}, expected exactly "
                                  '{"rtol": NUMBER, "atol": NUMBER}')
        for key in ("rtol", "atol"):
            if not _number(entry[key]) or entry[key] < 0:
                raise GoldenFileError(f"{path}: {where}.{key} is {entry[key]!r}, expected a finite number >= 0")
        out[stage] = Tolerance(float(entry["rtol"]), float(entry["atol"]))
    return out


def read_tolerances(folder: str | Path, golden: Trace | None = None) -> dict[str, Tolerance] | None:
    """The tolerances stored in `folder`, checked against `golden`'s stages; None when there is no file."""
    path = Path(folder) / TOLERANCES
    try:
        raw = _read_bytes(path)
    except FileNotFoundError:
        return None
    tolerances = _stages(_parse(raw, path)["stages"], path)
    if golden is not None:
        try:
            resolve_tolerances(golden, suggested=tolerances)
        except UsageError as exc:
            raise GoldenFileError(f"{path}: field stages: {exc}; re-suggest with --signalchain-update "
                                  "--signalchain-suggest N") from None
    return tolerances


def write_tolerances(folder: str | Path, tolerances: Mapping[str, Tolerance], *, runs: int, margin: float) -> Path:
    """Write `tolerances.json` into the golden `folder`, atomically."""
    path = Path(folder) / TOLERANCES
    doc = {"schema": TOLERANCES_SCHEMA, "schema_version": _VERSION, "runs": int(runs), "margin": float(margin),
           "stages": {stage: {"rtol": t.rtol, "atol": t.atol} for stage, t in tolerances.items()}}
    write_text_atomic(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return path
