"""`signalchain listen`: check written audio files the way a player reads them."""

from __future__ import annotations

import os
from dataclasses import replace

import click
import numpy as np
import soundfile as sf
from rich.table import Table

from .._units import plural
from ..audio._files import PathState, check_path, display_path, list_files
from ..audio.fingerprint import MAX_RATE, MIN_RATE
from ..audio.io import claimed_frames, read_audio
from ..audio.measure import measure_file
from ..checks.base import make, run_check
from ..checks.output import judge_file
from ..errors import SignalchainError, UsageError
from ..findings import Finding
from ..records.output import FileMeasurement
from ..report import console
from ..report.listen_page import HEADERS, file_row, render_listen
from ..report.progress import Reporter
from ..report.terminal import keep_words
from ._common import common_options, emit, guarded
from ._paths import need_path

__all__ = ["listen"]

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".aif", ".aiff", ".opus"}
STAGE, CHECK = "audio.written", "checks.output"


def _refused(path: str, state: PathState) -> Finding:
    """The finding for a path that is not a regular file: it is never opened."""
    shown = display_path(path)
    if state.kind == "missing":
        what = "no such file or folder" if state.detail == "no such file" else state.detail
        return make("file.missing", "error", STAGE, f"{shown}: {what}", CHECK, hint="check the path", path=shown)
    if state.kind == "not_regular":
        return make("file.not_regular", "error", STAGE, f"{shown} is {state.detail}, not a regular file: not opened",
                    CHECK, hint="give the audio file itself; a FIFO or device would block or never end", path=shown,
                    kind=state.detail)
    return make("file.unreadable", "error", STAGE, f"{shown}: {state.detail}", CHECK,
                hint="fix the link or the name", path=shown)


def _named(raw: str) -> PathState:
    """A path named on the command line: a folder, or a file that is audio by its name or its header;
    anything else is a usage error naming it (a typo must not pass for a finding about a file)."""
    expect = f"give audio files ({', '.join(sorted(AUDIO_SUFFIXES))}) or folders of them"
    need_path(raw, expect=expect)
    state = check_path(raw)
    if os.path.isdir(raw):
        return state
    if not state.regular:  # a FIFO or a device is never opened: it would block or never end
        raise UsageError(f"{display_path(raw)}: is {state.detail}, not an audio file or a folder; {expect}")
    if os.path.splitext(raw)[1].lower() not in AUDIO_SUFFIXES:
        try:
            sf.info(raw)  # a .caf, .w64, .au or a file without a suffix that holds audio is audio
        except Exception:
            raise UsageError(f"{display_path(raw)}: not an audio file (neither its name nor its header says so); "
                             f"{expect}") from None
    return state


def _collect(paths: tuple[str, ...]) -> tuple[list[str], list[Finding]]:
    """The regular audio files named or found in folders, and a finding for each bad file found in a
    folder (nothing that is not a regular file is opened). A bad path named on the command line is a
    usage error, found before anything is measured."""
    files, found = [], []
    for raw in paths:
        state = _named(raw)
        if state.kind == "not_regular" and os.path.isdir(raw):
            listing = list_files(raw, sorted(AUDIO_SUFFIXES), resolve=False)
            for path in listing.files:
                inner = check_path(path)
                if inner.regular:
                    files.append(path)
                else:
                    found.append(_refused(path, inner))
            found += [make("file.symlink_loop", "warning", STAGE, f"{display_path(link)}: {why}: not followed", CHECK,
                           hint="remove the link", path=display_path(link)) for link, why in listing.loops]
            found += [make("file.unreadable", "error", STAGE, f"{display_path(d)}: the folder cannot be listed ({why})",
                           CHECK, hint="fix its permissions", path=display_path(d)) for d, why in listing.unlisted]
        else:  # a regular audio file (_named refused everything else)
            files.append(raw)
    return list(dict.fromkeys(files)), found


def _nonfinite(rep: FileMeasurement) -> Finding | None:
    """A float file whose samples are NaN/inf is not a header misread: say how many are not finite.

    The header is believed when the finite samples, read as its own float subtype, look like
    audio (no huge values, few denormals): integer data misread as float gives either (and float
    bytes read as 16-bit PCM look like noise, so that re-reading proves nothing here)."""
    s = rep.stats
    share = float(s.get("nonfinite_fraction") or 0.0)
    if rep.error is not None or share <= 0 or rep.subtype not in ("FLOAT", "DOUBLE"):
        return None
    if s.get("peak", 0.0) > 100 or rep.denormal_share > 0.1:
        return None  # garbage read as float: judge_file's output.header says so
    total = rep.channels * rep.frames
    count = int(round(share * total))
    return make(
        "audio.nonfinite",
        "error",
        STAGE,
        f"{rep.path}: {count:,} of {total:,} samples ({100 * share:.3g}%) are NaN or infinite: the file is "
        f"{rep.subtype} as its header says, its samples are not finite",
        CHECK,
        hint="find where the audio became non-finite before it was written (decoder output, a division by "
        "a zero peak); writers store NaN as it is",
        path=rep.path,
        count=count,
        total=total,
        fraction=share,
    )


def _judge(path: str, rep: FileMeasurement, rate: int | None, subtype: str | None) -> list[Finding]:
    """judge_file, plus what the file's header claims against what it holds."""
    out: list[Finding] = []
    if rep.error is None and rep.sample_rate is not None and not MIN_RATE <= rep.sample_rate <= MAX_RATE:
        out.append(make("audio.sample_rate", "error", STAGE,
                        f"{rep.path}: the header says {rep.sample_rate} Hz, outside {MIN_RATE:,}-{MAX_RATE:,} Hz: "
                        "players refuse it or play it at a rate nobody recorded", CHECK,
                        hint="write the file with the audio's true sample rate", path=rep.path,
                        sample_rate=rep.sample_rate))
    claim = claimed_frames(path, rep.frames) if rep.error is None else None
    if claim is not None:
        sr = rep.sample_rate or 1
        out.append(make("file.truncated", "error", STAGE,
                        f"{rep.path}: the header claims {claim:,} frames ({claim / sr:.3f} s), the file holds "
                        f"{rep.frames:,} ({rep.frames / sr:.3f} s): cut short, or the header lies; what it holds is "
                        "measured and played", CHECK,
                        hint="write the file again (the writer was interrupted, or patched the header wrong)",
                        path=rep.path, frames_claimed=claim, frames_present=rep.frames))
    nan = _nonfinite(rep)
    if nan is not None:
        out.append(nan)
        rep = replace(rep, stats={**rep.stats, "nonfinite_fraction": 0.0})  # the rest judged on the finite samples
    return out + run_check("checks.output.file", judge_file, rep, rate, subtype)


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FILE_OR_DIR...")
@click.option("--rate", type=int, default=None, help="The sample rate the files should have (Hz).")
@click.option("--subtype", default=None, help="The subtype the files should have (e.g. PCM_16, FLOAT).")
@common_options()
@guarded
def listen(paths: tuple[str, ...], rate: int | None, subtype: str | None, json_path: str | None,
           html_path: str | None, debug: bool) -> int:
    """Check audio files (WAV/FLAC/OGG/MP3; folders are searched): level, silence, clipping, float overshoot, DC,
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
        raise UsageError(f"nothing to listen to in {', '.join(map(display_path, paths))}: no audio files "
                         f"({', '.join(sorted(AUDIO_SUFFIXES))}) found there")
    reports: list[FileMeasurement] = []
    real: dict[str, str] = {}  # shown name -> the path to open
    with Reporter("listen", total=len(files)) as bar:  # a bar on a terminal, timed lines in a log
        for path in files:
            shown = display_path(path)
            bar.item(os.path.basename(shown)[:40])
            rep = measure_file(path)
            rep.path = shown
            real[shown] = path
            reports.append(rep)
            findings += _judge(path, rep, rate, subtype)
    t = Table(title=f"listen · {plural(len(reports), 'file')}")
    longest = max((len(r.path) for r in reports), default=4)
    for h in HEADERS:  # the file names keep their width first (up to 80 columns); the numbers fold
        t.add_column(h, overflow="fold", min_width=min(longest, 80) if h == "file" else None)
    for r in reports:
        t.add_row(*file_row(r))
    con.print(keep_words(t, con.width))
    expected = "".join(
        [f" · expected rate {rate} Hz" if rate else "", f" · expected subtype {subtype}" if subtype else ""]
    )

    def load(shown: str) -> tuple[np.ndarray, int] | None:
        try:
            af = read_audio(real.get(shown, shown))
        except SignalchainError:
            return None
        return (af.audio, af.sample_rate) if MIN_RATE <= af.sample_rate <= MAX_RATE else None

    return emit(con, findings, title="Findings", json_path=json_path,
                fields=dict(files=[vars(r) for r in reports], expected_rate=rate, expected_subtype=subtype),
                html_path=html_path, page=lambda: render_listen(reports, findings, load, expected))
