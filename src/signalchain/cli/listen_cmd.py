"""`signalchain listen`: check written audio files the way a player reads them."""

from __future__ import annotations

from pathlib import Path

import click
import soundfile as sf
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from ..audio.io import read_audio
from ..checks.base import make, run_check
from ..checks.output import FileReport, judge_file
from ..errors import SignalchainError, UsageError
from ..experiments.output import measure_file
from ..findings import Finding, exit_code
from ..report import console, print_findings, write_json
from ..report.listen_page import HEADERS, file_row, render_listen
from ._common import common_options, guarded

__all__ = ["listen"]

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".aif", ".aiff", ".opus"}


def _collect(paths: tuple[str, ...]) -> tuple[list[Path], list[Finding]]:
    files, missing = [], []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in AUDIO_SUFFIXES)
        elif p.exists():
            files.append(p)
        else:
            missing.append(make("file.missing", "error", "audio.written", f"{raw}: no such file or folder",
                                "checks.output", hint="check the path", path=raw))
    return list(dict.fromkeys(files)), missing


def _load(path: str) -> tuple[object, int] | None:
    try:
        af = read_audio(path)
    except SignalchainError:
        return None
    return af.audio, af.sample_rate


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FILE_OR_DIR...")
@click.option("--rate", type=int, default=None, help="The sample rate the files should have (Hz).")
@click.option("--subtype", default=None, help="The subtype the files should have (e.g. PCM_16, FLOAT).")
@common_options()
@guarded
def listen(paths: tuple[str, ...], rate: int | None, subtype: str | None, json_path: str | None,
           html_path: str | None, debug: bool) -> int:
    """Check audio files (WAV/FLAC/OGG/MP3; folders are searched): level, silence, clipping, DC,
    channel phase, and the header's rate, subtype and format against what the data hold."""
    if rate is not None and rate <= 0:
        raise UsageError(f"--rate must be a positive number of Hz, got {rate}")
    if subtype is not None:
        subtype = subtype.upper()
        known = sorted(sf.available_subtypes())
        if subtype not in known:
            raise UsageError(f"--subtype {subtype!r} is not a soundfile subtype; allowed: {', '.join(known)}")
    con = console()
    files, findings = _collect(paths)
    if not files and not findings:
        raise UsageError(f"no audio files ({', '.join(sorted(AUDIO_SUFFIXES))}) under {', '.join(paths)}")
    reports: list[FileReport] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task("listen", total=len(files))
        for path in files:
            bar.update(task, description=path.name[:40])
            rep = measure_file(path)
            reports.append(rep)
            findings += run_check("checks.output.file", judge_file, rep, rate, subtype)
            bar.advance(task)
    t = Table(title=f"listen · {len(reports)} files")
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for r in reports:
        t.add_row(*file_row(r))
    con.print(t)
    print_findings(findings, con, title="Findings")
    expected = "".join([f" · expected rate {rate} Hz" if rate else "", f" · expected subtype {subtype}" if subtype else ""])
    if json_path:
        write_json(json_path, findings, files=[vars(r) for r in reports], expected_rate=rate, expected_subtype=subtype)
    if html_path:
        render_listen(reports, findings, _load, expected).write(html_path)
        con.print(f"report: {html_path}")
    return exit_code(findings)
