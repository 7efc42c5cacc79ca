"""The lines of manifests and metadata tables, one at a time, each a dict or the finding that says
why it is not one. Nothing a line holds ends the reading: a line of a gigabyte is read past in
pieces, a JSON value nested 100 000 deep or an integer of 5 000 digits is that line's finding,
bytes that are not UTF-8 and lone surrogate escapes are named with their field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..audio._files import display_path, has_surrogates, open_regular, without_surrogates
from ..checks.base import make
from ..errors import SignalchainError
from ..findings import Finding
from ..records.audit import STAGE_DATASET

__all__ = ["LINE_LIMIT", "PATH_FIELDS", "short", "invalid", "json_rows", "csv_rows", "loads_json"]

CHECK = "audit.sources"
LINE_LIMIT = 16 << 20  # bytes: a manifest line is a few hundred; a longer one is read past, not held
PATH_FIELDS = ("path", "file_name", "info_path")  # file names: a byte that is not UTF-8 is legal there

Row = tuple[int, "dict[str, Any] | Finding"]


def short(value: object, limit: int = 60) -> str:
    """A repr short enough for a one-line message, in ASCII (a hostile value cannot break a line)."""
    try:
        text = ascii(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def invalid(path: Path, line: int | None, why: str) -> Finding:
    """`manifest.invalid` naming the file (and line)."""
    shown = display_path(path)
    where = f"{shown}:{line}" if line else shown
    return make("manifest.invalid", "error", STAGE_DATASET, f"{where}: {why}", CHECK,
                hint="fix or drop this line; loaders either crash on it or silently skip the example",
                manifest=shown, line=line)


def _open(path: Path) -> BinaryIO:
    """A binary reader of a regular manifest file (anything else is refused before it is opened)."""
    fh = os.fdopen(open_regular(path), "rb")
    return gzip.open(fh) if path.name.endswith(".gz") else fh  # type: ignore[return-value]


def _lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines; None for a line past LINE_LIMIT (read through in pieces, never held)."""
    with _open(path) as fh:
        n = 0
        while raw := fh.readline(LINE_LIMIT + 1):
            n += 1
            if len(raw) > LINE_LIMIT and not raw.endswith(b"\n"):
                while (more := fh.readline(LINE_LIMIT)) and not more.endswith(b"\n"):
                    pass
                yield n, None
            else:
                yield n, raw


def loads_json(text: str, multiline: bool = False) -> tuple[Any, str | None]:
    """The JSON value of one line (or of a whole document, `multiline`), or why it is not one
    (never raises)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}" if multiline else f"column {exc.colno}"
        return None, f"invalid JSON at {where}: {exc.msg}"
    except RecursionError:
        return None, "invalid JSON: nested deeper than a JSON reader follows (Python's stops near 1000 levels)"
    except ValueError as exc:  # an integer of more than 4300 digits (int's guard against slow parsing)
        if "digits" in str(exc):
            return None, f"invalid JSON: a number of more than {sys.get_int_max_str_digits()} digits"
        return None, f"invalid JSON: {str(exc)[:160]}"


def _holds_surrogate(value: Any) -> bool:
    """Whether any key or string inside a JSON value holds a lone surrogate (iterative: any depth)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if has_surrogates(v):
                return True
        elif isinstance(v, dict):
            stack += [*v.keys(), *v.values()]
        elif isinstance(v, list):
            stack += v
    return False


def _scrub(value: Any) -> Any:
    """A copy of a JSON value with every lone surrogate replaced by U+FFFD (iterative: any depth)."""
    if isinstance(value, str):
        return without_surrogates(value)
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, key, v = stack.pop()
        if isinstance(v, str):
            parent[key] = without_surrogates(v)
        elif isinstance(v, dict):
            parent[key] = new = {}
            for k, x in v.items():
                kk = without_surrogates(k) if isinstance(k, str) else k
                new[kk] = None
                stack.append((new, kk, x))
        elif isinstance(v, list):
            parent[key] = new = [None] * len(v)
            stack += [(new, i, x) for i, x in enumerate(v)]
        else:
            parent[key] = v
    return root[0]


def _clean(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`row` with lone surrogates replaced outside the file-name fields, and the fields that held one.

    A JSON escape such as \\udcff decodes to text that no UTF-8 writer, tokenizer or Arrow column
    takes; in a file name it is how Python spells a byte that is not UTF-8, and it stays (the file
    is found by it)."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for k, v in row.items():
        if k in PATH_FIELDS and isinstance(v, str):
            out[k] = v
        elif has_surrogates(k) or _holds_surrogate(v):
            bad.append(without_surrogates(k))
            out[without_surrogates(k)] = _scrub(v)
        else:
            out[k] = v
    return out, bad


def json_rows(path: Path) -> Iterator[Row]:
    """Each non-blank line of a JSON-lines file as a dict, or the finding that says why it is not one."""
    try:
        for n, raw in _lines(path):
            if raw is None:
                yield n, invalid(path, n, f"a line longer than {LINE_LIMIT:,} bytes (not read)")
                continue
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield n, invalid(path, n, f"not UTF-8 (byte {exc.start} of the line is {raw[exc.start]:#04x})")
                continue
            row, why = loads_json(text)
            if why is None and not isinstance(row, dict):
                why = f"a JSON {type(row).__name__}, not an object"
            if why is not None:
                yield n, invalid(path, n, why)
                continue
            if _holds_surrogate(row):
                row, fields = _clean(row)
                if fields:
                    yield n, invalid(path, n, f"{', '.join(map(short, fields[:4]))}: a lone surrogate escape "
                                              "(\\udXXX) is not text a UTF-8 reader, tokenizer or Arrow column "
                                              "accepts (replaced by U+FFFD for the audit)")
            yield n, row
    except (OSError, EOFError, SignalchainError) as exc:  # a truncated .gz, an unreadable file: what was read counts
        yield 0, invalid(path, None, f"cannot be read to the end ({type(exc).__name__}: {str(exc)[:200]})")


def csv_rows(path: Path) -> Iterator[Row]:
    """Each row of an audiofolder's metadata.csv as a dict, or the finding that says why it is not one."""
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            text = fh.read().decode("utf-8", errors="surrogateescape")
    except (OSError, SignalchainError) as exc:
        yield 0, invalid(path, None, f"cannot be read ({str(exc)[:200]})")
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    while True:
        before = reader.line_num
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a field past csv's size limit: that row (it is consumed), then the next
            at = max(reader.line_num, before + 1)
            yield at, invalid(path, at, f"not a CSV row ({exc})")
            continue
        n = reader.line_num
        bad = [k for k, v in row.items() if k != "file_name" and isinstance(v, str) and has_surrogates(v)]
        if bad:
            yield n, make("manifest.invalid", "error", STAGE_DATASET,
                          f"{display_path(path)}:{n}: column {short(bad[0])} is not UTF-8", CHECK,
                          hint="re-save metadata.csv as UTF-8", manifest=display_path(path), line=n)
            continue
        yield n, {k: v for k, v in row.items() if k is not None}
