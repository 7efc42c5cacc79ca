"""Figures and places as people read them: durations in a unit that keeps their digits, counts with
their noun, a library's file as the package's own path.

A fixed "ms with one decimal" turns a 40 µs update into "0.0 ms", which reads as "took no time";
`duration` picks µs, ms or s so that every figure keeps about three significant digits.
"""

from __future__ import annotations

import math
import os
import sysconfig

__all__ = ["duration", "plural", "short_path"]

_STDLIB = tuple({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(k))})


def _digits(x: float) -> str:
    """x with about three significant digits and no trailing zeros past the point (12.3, 1.23, 123)."""
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}".rstrip("0").rstrip(".")


def duration(seconds: float | None) -> str:
    """'12.3 s', '4.56 ms', '38 µs', '0 s' for seconds; '—' for None or a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds == 0:
        return "0 s"
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    # the thresholds sit where the smaller unit would round up to "1000"
    scale, unit = (1.0, "s") if s >= 0.9995 else (1e-3, "ms") if s >= 0.9995e-3 else (1e-6, "µs")
    value = s / scale
    return f"{sign}{_digits(value)} {unit}" if value >= 0.005 else f"{sign}<0.01 µs"


def plural(n: float, noun: str, many: str | None = None) -> str:
    """'1 file', '2 files', '0 files'; `many` for an irregular plural ('1 match', '3 matches')."""
    many = many or (noun + "es" if noun.endswith(("s", "sh", "ch", "x", "z")) else noun + "s")
    count = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{count} {noun if n == 1 else many}"


def short_path(where: str) -> str:
    """A file (or "file:line") as short as it stays unambiguous: a library's path from its package
    ('transformers/models/encodec/modeling_encodec.py:153'), the standard library's from its root
    ('contextlib.py:81'), a file under the working directory relative to it; others unchanged."""
    if not where or where.startswith("<"):
        return where
    for marker in ("site-packages", "dist-packages"):
        cut = where.rfind(os.sep + marker + os.sep)
        if cut >= 0:
            return where[cut + len(marker) + 2:]
    absolute = os.path.abspath(where)
    for root in _STDLIB:
        if absolute.startswith(root):
            return absolute[len(root):]
    here = os.getcwd() + os.sep
    return absolute[len(here):] if absolute.startswith(here) else where
