"""CSV logs: Lightning's `CSVLogger` `metrics.csv` and a W&B run history exported as CSV.

Lightning writes one row per `log_metrics` call with the union of the columns so far (blank where a
row has no value) and `step`/`epoch` columns; `hparams.yaml` beside it is the run's configuration.
A W&B export has `_step`, `_runtime` and `_timestamp` columns (its chart export instead has `Step`
and `<run> - <metric>` columns with `__MIN`/`__MAX` companions, which are dropped).

A header that changes mid-file (a resumed run appending with new columns) starts a new block read
with its own header; a row with a different number of cells (a line cut mid-write) and a cell that is
not a number are notes naming the line. Columns are converted with numpy in one go, so a 10^6-row file
costs one `csv` pass.
"""

from __future__ import annotations

import csv
import os
import re
from typing import Any

import numpy as np

from ..records.history import ReadNote, RunHistory, Series
from ._points import number
from ._yamlfile import read_yaml

__all__ = ["is_lightning_csv", "is_wandb_csv", "read_csv_log"]

_STEP = ("step", "_step", "Step", "global_step", "trainer/global_step")
_WALL = ("_timestamp",)
_SKIP_SUFFIX = ("__MIN", "__MAX", "__step")
_CHART = re.compile(r"^.+ - (.+)$")


def _header(path: str) -> list[str]:
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            return next(csv.reader(fh), [])
    except OSError:
        return []


def _csv_in(path: str, name: str) -> str | None:
    if os.path.isfile(path):
        return path if path.endswith(".csv") else None
    cand = os.path.join(path, name)
    return cand if os.path.isfile(cand) else None


def is_lightning_csv(path: str) -> bool:
    f = _csv_in(path, "metrics.csv")
    if f is None:
        return False
    header = _header(f)
    # Lightning's file name is enough: an empty or cut `metrics.csv` is still the run's log, read with a note
    named = os.path.basename(f) == "metrics.csv"
    return "_step" not in header and (named or any(h in ("step", "epoch") for h in header))


def is_wandb_csv(path: str) -> bool:
    f = _csv_in(path, "history.csv") if os.path.isdir(path) else (path if path.endswith(".csv") else None)
    if f is None and os.path.isdir(path):
        cands = [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".csv")]
        f = next((c for c in cands if any(h in ("_step", "Step") for h in _header(c))), None)
    return f is not None and any(h in ("_step", "Step") for h in _header(f))


def _column(
    cells: list[str], name: str, path: str, lines: list[int], notes: list[ReadNote]
) -> tuple[np.ndarray, np.ndarray]:
    """(row indices with a value, float values) of one column; non-numbers are notes."""
    idx = [i for i, c in enumerate(cells) if c != ""]
    if not idx:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    raw = [cells[i] for i in idx]
    try:
        return np.asarray(idx, dtype=np.int64), np.asarray(raw, dtype=np.float64)
    except ValueError:
        keep, vals, bad = [], [], []
        for i, c in zip(idx, raw):
            v = number(c)
            if v is None:
                bad.append(i)
            else:
                keep.append(i)
                vals.append(v)
        if bad and len(bad) < len(idx):  # a column of text (a run name, a path) is not a metric: no note
            notes.append(
                ReadNote(
                    path,
                    f"column {name!r}: {len(bad)} cell(s) are not numbers (first {cells[bad[0]]!r}); skipped",
                    lines[bad[0]],
                )
            )
        return np.asarray(keep, dtype=np.int64), np.asarray(vals, dtype=np.float64)


def _block(
    path: str, header: list[str], rows: list[list[str]], lines: list[int], run: RunHistory, acc: dict[str, list[Any]]
) -> None:
    cols = list(zip(*rows)) if rows else [() for _ in header]
    names = [h.strip() for h in header]
    step_col = next((names.index(s) for s in _STEP if s in names), None)
    if step_col is None:
        steps = np.arange(len(rows), dtype=np.int64)
        run.notes.append(ReadNote(path, "has no step column (step, _step, Step): rows numbered in order", lines[0] - 1))
    else:
        si, sv = _column(list(cols[step_col]), names[step_col], path, lines, run.notes)
        steps = np.full(len(rows), -1, dtype=np.int64)
        steps[si] = sv.astype(np.int64)
    wall_col = next((names.index(s) for s in _WALL if s in names), None)
    wall = None
    if wall_col is not None:
        wi, wv = _column(list(cols[wall_col]), names[wall_col], path, lines, run.notes)
        wall = np.full(len(rows), np.nan)
        wall[wi] = wv
    epoch_col = names.index("epoch") if "epoch" in names else None
    epochs = None
    if epoch_col is not None:
        ei, ev = _column(list(cols[epoch_col]), "epoch", path, lines, run.notes)
        epochs = np.full(len(rows), np.nan)
        epochs[ei] = ev
    for j, name in enumerate(names):
        if j in (step_col, wall_col) or not name or name.endswith(_SKIP_SUFFIX) or name in ("_runtime",):
            continue
        m = _CHART.match(name)
        label = m.group(1) if m else name
        i, v = _column(list(cols[j]), name, path, lines, run.notes)
        ok = steps[i] >= 0
        i, v = i[ok], v[ok]
        if not len(i):
            continue
        a = acc.setdefault(label, [[], [], [], []])
        a[0].append(steps[i])
        a[1].append(v)
        a[2].append(wall[i] if wall is not None else np.full(len(i), np.nan))
        a[3].append(epochs[i] if epochs is not None else np.full(len(i), np.nan))


def read_csv_log(path: str, fmt: str) -> RunHistory:
    run = RunHistory(root=path, format=fmt)
    if os.path.isfile(path):
        f = path
    elif fmt == "lightning-csv":
        f = os.path.join(path, "metrics.csv")
    else:
        f = os.path.join(path, "history.csv")
        if not os.path.isfile(f):
            f = next(
                os.path.join(path, n)
                for n in sorted(os.listdir(path))
                if n.endswith(".csv") and any(h in ("_step", "Step") for h in _header(os.path.join(path, n)))
            )
    run.sources.append(f)
    acc: dict[str, list[Any]] = {}
    try:
        ends_clean = _ends_with_newline(f)
        fh = open(f, newline="", encoding="utf-8", errors="replace")
    except OSError as exc:
        run.notes.append(ReadNote(f, f"cannot be read: {exc.strerror or exc}"))
        return run
    with fh:
        reader = csv.reader(fh)
        header: list[str] | None = None
        rows: list[list[str]] = []
        lines: list[int] = []
        try:
            for row in reader:
                line = reader.line_num
                if header is None:
                    header = row
                    continue
                if row == header:  # a resumed run appending under the same header writes it again
                    run.notes.append(ReadNote(f, "the header repeats here (a resumed run appending): skipped", line))
                    continue
                if row and row[0] in header and all(number(c) is None for c in row if c):
                    # a new header: a resumed run appended with other columns
                    run.notes.append(
                        ReadNote(
                            f,
                            f"the header changes here (now {len(row)} columns); read each block with its own header",
                            line,
                        )
                    )
                    if rows:
                        _block(f, header, rows, lines, run, acc)
                    header, rows, lines = row, [], []
                    continue
                if len(row) != len(header):
                    if row:
                        run.notes.append(
                            ReadNote(
                                f,
                                f"a row of {len(row)} cells under a header of {len(header)} "
                                "(a line cut mid-write, or a changed header): skipped",
                                line,
                            )
                        )
                    continue
                rows.append(row)
                lines.append(line)
        except csv.Error as exc:
            run.notes.append(ReadNote(f, f"stops being CSV ({exc}); read the rows before it", reader.line_num))
        if header is None:
            run.notes.append(ReadNote(f, "is empty"))
            return run
        if not ends_clean and rows and lines[-1] == reader.line_num:
            # a writer ends every row with a line end: a last row without one was cut mid-write, and its
            # last cell may be a number cut short (`3.14` of `3.1415`), so the row is not a point
            rows.pop()
            run.notes.append(
                ReadNote(f, "the last line has no line end (cut mid-write): skipped", lines.pop())
            )
        if rows:
            _block(f, header, rows, lines, run, acc)
    for name, (s, v, w, e) in acc.items():
        wall = np.concatenate(w)
        epochs = np.concatenate(e)
        run.add(
            Series(
                name,
                np.concatenate(s),
                np.concatenate(v),
                None if np.isnan(wall).all() else wall,
                None if np.isnan(epochs).all() else epochs,
                source=f,
            )
        )
    if fmt == "lightning-csv":
        _hparams(os.path.join(os.path.dirname(f), "hparams.yaml"), run)
    return run


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) in (b"\n", b"\r")


def _hparams(path: str, run: RunHistory) -> None:
    data = read_yaml(path, run, "is not YAML")
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, (int, float, str, bool)) or v is None:
                run.config[str(k)] = v
