"""One answer per mistake in a path on the command line (DESIGN §5).

A path that is missing, a folder that holds nothing to work on, or a file of the wrong kind is a
usage error: exit 2 and one line that names the path, on every command, before anything slow runs.
The words are the same everywhere:

    signalchain: error: --stats stats.json: no such file or folder
    signalchain: error: out/report.json: cannot be written: out is a file, not a folder
    signalchain: error: nothing to listen to in renders/: no audio files (.wav, …) found there

A bad file *inside* a folder or a manifest the user gave is different: it is a finding naming it,
and the rest of the work goes on (DESIGN §8).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from ..audio._files import check_path, display_path
from ..errors import UsageError

__all__ = ["need_path", "need_writable", "ExistingPath", "check_output_target"]


def _what(path: str | os.PathLike[str]) -> str:
    """What is at `path`, in words ("a file", "a folder", "a FIFO", …)."""
    state = check_path(path)
    if state.regular:
        return "a file"
    if os.path.isdir(path):
        return "a folder"
    return state.detail or "not a file"


def need_path(path: str | os.PathLike[str], *, option: str | None = None, want: str = "any",
              expect: str = "") -> Path:
    """`path` when something is there (`want`: "any", "file" or "folder"); else a `UsageError` naming it:
    "[OPTION ]PATH: no such file or folder", "…: is a folder, not a file", "…: is a file, not a folder",
    each followed by "; `expect`" when given (what the command takes there)."""
    shown = display_path(os.fspath(path))
    where = (option + ("" if option.endswith("=") else " ") + shown) if option else shown  # `--split NAME=` + path
    tail = f"; {expect}" if expect else ""
    state = check_path(path)
    if state.kind == "missing":
        why = "no such file or folder" if state.detail == "no such file" else state.detail
        raise UsageError(f"{where}: {why}{tail}")
    if state.kind in ("loop", "error"):
        raise UsageError(f"{where}: {state.detail}{tail}")
    what = _what(path)
    if want == "file" and not state.regular:
        raise UsageError(f"{where}: is {what}, not a file{tail}")
    if want == "folder" and what != "a folder":
        raise UsageError(f"{where}: is {what}, not a folder{tail}")
    return Path(os.fspath(path))


class ExistingPath(click.Path):
    """`click.Path(exists=True)` whose refusals read as `need_path`'s ("no such file or folder", "is a
    file, not a folder"), so that click's checks answer a mistake in the same words as ours."""

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True):
        super().__init__(exists=True, file_okay=file_okay, dir_okay=dir_okay)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (str, os.PathLike)):
            want = "folder" if not self.file_okay else ("file" if not self.dir_okay else "any")
            try:
                need_path(value, want=want)
            except UsageError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


def need_writable(path: str | os.PathLike[str], *, option: str | None = None) -> None:
    """A file signalchain will write (a report, a cache) whose folder is a file can never be written:
    a `UsageError` naming it, before the command runs. Missing folders are made when it is written."""
    parent = Path(os.fspath(path)).parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if os.path.lexists(parent) and not os.path.isdir(parent):
        shown = display_path(os.fspath(path))
        raise UsageError(f"{f'{option} ' if option else ''}{shown}: cannot be written: "
                         f"{display_path(str(parent))} is {_what(parent)}, not a folder")


def check_output_target(path: str | None) -> None:
    """`need_writable` for a `--json`/`--html` destination, as click's answer to a bad value (not after a
    long doctor); `-` is standard output."""
    if path in (None, "-"):
        return
    try:
        need_writable(path)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None
