"""Metadata as tables a person reads: a stage's meta as key/value rows, a `json` stage's records (one
dict per example) as one row per example with a column per key. Never a Python dict's repr."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .html import esc, table

__all__ = ["cell_text", "mapping_table", "records_table"]

_LIST_ITEMS = 16  # a vocabulary of hundreds of strings is summarised, not printed


def cell_text(value: Any) -> str:
    """One value as plain text for a table cell: lists joined by commas, mappings as `key: value`
    pairs, floats to 4 significant digits, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {cell_text(v)}" for k, v in value.items()) or "—"
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):  # numpy values
        return cell_text(value.tolist())
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        if len(items) > _LIST_ITEMS:
            return f"{len(items)} items: {', '.join(_item(v) for v in items[:4])}, …"
        return ", ".join(_item(v) for v in items) or "(empty)"
    return str(value)


def _item(value: Any) -> str:
    """An item of a list: a nested list keeps its brackets, so [[0, 1], [2, 3]] stays two pairs."""
    is_list = isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and _ndim(value) > 0)
    return f"[{cell_text(value)}]" if is_list else cell_text(value)


def _ndim(value: Any) -> int:
    return len(getattr(value, "shape", ()))


def mapping_table(values: Mapping[str, Any], headers: Sequence[str] = ("key", "value")) -> str:
    """A mapping as a two-column table, one row per key."""
    return table([[f"<code>{esc(k)}</code>", esc(cell_text(v))] for k, v in values.items()], headers, raw=True)


def records_table(items: Sequence[Any], limit: int) -> str:
    """A list of records (one per example) as a table: a column per key when they are mappings (keys in
    the order first met), else one column of values."""
    shown = list(items[:limit])
    more = f'<p class="muted">{len(items) - limit} more not shown</p>' if len(items) > limit else ""
    if shown and all(isinstance(x, Mapping) for x in shown):
        keys = list(dict.fromkeys(k for x in shown for k in x))
        rows = [[str(i)] + [cell_text(x[k]) if k in x else "" for k in keys] for i, x in enumerate(shown)]
        return table(rows, ["#", *map(str, keys)]) + more
    return table([[str(i), cell_text(x)] for i, x in enumerate(shown)], ["#", "record"]) + more
