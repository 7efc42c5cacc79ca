"""Read a JSON file that a dead run may have cut short: the whole document when it parses, else the
complete items of one top-level list recovered one by one (`json.JSONDecoder.raw_decode`), which is
what a half-written `trainer_state.json` or `history.json` still holds."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..records.history import ReadNote

__all__ = ["read_json", "LIMIT"]

LIMIT = 1 << 30  # a log bigger than 1 GiB is not a log


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _items(text: str, start: int, path: str, notes: list[ReadNote]) -> list[Any]:
    """The complete values of the list whose '[' is at `start`, up to the first one that does not parse."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    pos = start + 1
    n = len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            notes.append(
                ReadNote(
                    path,
                    f"the file ends before its list closes (cut mid-write); read the {len(out)} complete items",
                    _line(text, n),
                )
            )
            break
        if text[pos] == "]":
            break
        try:
            value, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            notes.append(
                ReadNote(
                    path,
                    f"the file ends inside item {len(out) + 1} of the list (cut mid-write); "
                    f"read the {len(out)} complete items before it",
                    _line(text, pos),
                )
            )
            break
        out.append(value)
    return out


def read_json(path: str, list_key: str | None, notes: list[ReadNote]) -> Any:
    """The document at `path`; when it does not parse, `{list_key: [complete items]}` (or the bare
    list when `list_key` is None and the document is a list), with a note. None when nothing is usable."""
    try:
        size = os.path.getsize(path)
        if size > LIMIT:
            notes.append(ReadNote(path, f"{size} bytes: larger than the {LIMIT} a log may be; not read"))
            return None
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        notes.append(ReadNote(path, f"cannot be read: {exc.strerror or exc}"))
        return None
    if not text.strip():
        notes.append(ReadNote(path, "is empty"))
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = getattr(exc, "lineno", None)
        if list_key is None:
            start = text.find("[")
        else:
            m = re.search(rf'"{re.escape(list_key)}"\s*:\s*\[', text)
            start = m.end() - 1 if m else -1
        if start < 0:
            notes.append(
                ReadNote(
                    path,
                    f"is not JSON ({getattr(exc, 'msg', exc)}) and holds no {list_key or 'list'} to recover",
                    where,
                )
            )
            return None
        before = len(notes)
        items = _items(text, start, path, notes)
        if len(notes) == before:  # the list is whole: what follows it was cut or is damaged
            notes.append(
                ReadNote(
                    path,
                    f"is not JSON after its {list_key or 'list'} ({getattr(exc, 'msg', exc)}; cut mid-write?); "
                    f"read the list's {len(items)} items, the rest is lost",
                    where,
                )
            )
        return items if list_key is None else {list_key: items, "_truncated": True}
