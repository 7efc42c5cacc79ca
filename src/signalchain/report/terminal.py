"""Terminal rendering with rich: findings, traces and comparisons."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..findings import Finding, sort_findings
from .describe import describe_diff, describe_record

if TYPE_CHECKING:  # annotations only: the terminal needs neither numpy nor the golden package to print
    from ..golden.compare import Comparison
    from ..trace import Trace

__all__ = ["console", "human_to_stderr", "print_findings", "collapse_hints", "keep_words", "print_trace",
           "print_comparison"]

#: Set by `--json -`: standard output carries the JSON report, so every console writes to stderr.
_TO_STDERR = False


def human_to_stderr(on: bool = True) -> None:
    global _TO_STDERR
    _TO_STDERR = on

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def console(stderr: bool = False) -> Console:
    """A rich console; when output is not a terminal (CI logs, pipes) tables get 120 columns. After
    `human_to_stderr()` (`--json -`) every console writes to stderr."""
    stderr = stderr or _TO_STDERR
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 120
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


#: the widest word (a path) a column is widened for; a longer one is folded, as nothing else fits
WORD_CAP = 100


def keep_words(table: Table, width: int | None = None, cap: int = WORD_CAP) -> Table:
    """Widen each column to its longest word (up to `cap`), so that cells wrap between words and a
    path is never broken in the middle; within `width` (the console's), the columns holding paths
    share what the others leave, and a path longer than its column is cut in the middle (its file
    name whole) rather than folded. Returns `table`."""
    needs, paths = [], []
    for column in table.columns:
        longest, path = 0, False
        for cell in column._cells:
            if not isinstance(cell, (str, Text)):
                continue
            plain = cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain
            words = plain.split()
            longest = max([longest, *(len(word) for word in words)])
            path = path or any(_is_path(word) for word in words)
        needs.append(max(column.min_width or 0, min(longest, cap)))
        paths.append(path)
    if width is not None and any(paths):
        # a column's longest word is its floor (rich folds nothing shorter): the path columns get what is left
        left = width - 3 * len(needs) - 1 - sum(n for n, p in zip(needs, paths, strict=True) if not p)
        wanted = sum(n for n, p in zip(needs, paths, strict=True) if p)
        if wanted > left:
            needs = [max(8, n * left // wanted) if p else n for n, p in zip(needs, paths, strict=True)]
    for column, need in zip(table.columns, needs, strict=True):
        column.min_width = need
        column._cells = [_squeezed(c, need) for c in column._cells]
    return table


def _squeezed(cell: object, width: int) -> object:
    """The cell with its too-long paths cut in the middle (as plain text: such a cell loses its styles)."""
    if not isinstance(cell, (str, Text)):
        return cell
    plain = cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain
    short = re.sub(r"\S+", lambda m: _squeeze(m.group(), width), plain)
    return cell if short == plain else Text(short)


_FILE = re.compile(r"\.\w{1,5}(:\d+)?\W*$")  # ends like a file name (.wav, .py:153)


def _is_path(word: str) -> bool:
    """A file path, not a ratio or a format ("WAV/PCM_16"): two separators, a leading one, or a file name."""
    return ("\\" in word or word.count("/") >= 2 or word.startswith(("/", "./", "../", "~/"))
            or ("/" in word and bool(_FILE.search(word))))


def _squeeze(word: str, width: int) -> str:
    """A path too long for its column, cut in the middle ('/data/mu…/track_0123.wav'): its file name
    stays whole, and the rest of the cell wraps between words. Other words are left to fold."""
    if len(word) <= width or not _is_path(word):
        return word
    head = max(1, min(12, (width - 1) // 4))
    return word[:head] + "…" + word[len(word) - (width - 1 - head):]


def print_findings(findings: Sequence[Finding], out: Console, title: str = "Findings") -> None:
    if not findings:
        out.print("[green]No findings.[/green]")
        return
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("severity")
    table.add_column("id")
    table.add_column("stage")
    table.add_column("message", overflow="fold")
    for f in sort_findings(findings):
        table.add_row(f"[{_STYLE[f.severity.value]}]{f.severity.value}[/]", f.id, f.stage or "—", escape(f.message))
    out.print(keep_words(table, out.width))
    for fid, hint, n in collapse_hints(findings):
        out.print(f"  [bold]{escape(fid)}[/bold] → {escape(hint)}" + (f" [dim](×{n})[/dim]" if n > 1 else ""))


def collapse_hints(findings: Sequence[Finding]) -> list[tuple[str, str, int]]:
    """(id, hint, how many findings give it) for the errors' and warnings' hints, each said once, in
    the order of the findings: 26 files with the same problem get one hint "(×26)", not 26 lines."""
    counts: dict[tuple[str, str], int] = {}
    for f in sort_findings(findings):
        if f.severity.value != "info" and f.hint:
            counts[(f.id, f.hint)] = counts.get((f.id, f.hint), 0) + 1
    return [(fid, hint, n) for (fid, hint), n in counts.items()]


def print_trace(trace: Trace, out: Console, title: str = "Stages") -> None:
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("stage")
    table.add_column("kind")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("summary", overflow="fold")
    for rec in trace:
        table.add_row(str(rec.order), rec.name, rec.kind, rec.dtype, "×".join(map(str, rec.shape)) or "—",
                      describe_record(rec))
    out.print(keep_words(table, out.width))


def print_comparison(comparison: Comparison, out: Console) -> None:
    table = Table(title="Stage by stage")
    table.add_column("stage")
    table.add_column("kind")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    first = comparison.first_divergence
    for d in comparison.stages:
        if d.equal:
            status = "[green]same[/green]"
        elif d is first:
            status = "[bold red]FIRST DIVERGENCE[/bold red]"
        else:
            status = "[red]differs[/red]"
        table.add_row(d.stage, d.kind, status, "" if d.equal else describe_diff(d))
    out.print(keep_words(table, out.width))
    if first is None:
        out.print("[green]identical[/green]: every stage matches the golden batch")
    else:
        out.print(f"[bold red]first divergent stage: {first.stage}[/bold red] ({first.kind}): {describe_diff(first)}")
        if comparison.downstream:
            out.print(f"downstream: {', '.join(comparison.downstream)}")
