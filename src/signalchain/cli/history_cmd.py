"""`signalchain history RUN`: a finished or failed run diagnosed from its logs and checkpoints."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from .._units import plural
from ..errors import UsageError
from ..report import console
from ._clock import elapsed
from ._common import common_options, emit, guarded
from ._paths import need_path

__all__ = ["history"]


def _summary(result: Any) -> Table:
    run = result.run
    t = Table(title=f"{run.format} log · {run.axis} axis · {run.points():,} points", title_justify="left")
    for col in ("series", "role", "points", "steps"):
        t.add_column(col)
    for s in run.series.values():
        span = f"{int(s.steps[0])}…{int(s.steps[-1])}" if len(s) else "—"
        role = s.role + (f" {s.codebook}" if s.codebook is not None else "") if s.role else "— (shown, not judged)"
        t.add_row(s.name, role, str(len(s)), span)
    return t


def _pair(result: Any) -> list[Text]:
    """The pair and the bisect line as plain text (a path is never read as markup); the command is never
    wrapped, so that it copies and pastes as one line."""
    lines = []
    p = result.pair
    if p is not None:
        good = f"step {p.good.step} ({p.good.path})" if p.good else "none saved before it"
        bad = f"step {p.bad.step} ({p.bad.path})" if p.bad else "none saved at or after it"
        lines.append(f"first bad step {p.bad_step} ({p.finding}); last healthy checkpoint: {good}; "
                     f"first unhealthy: {bad}")
    if result.bisect:
        lines.append("next, bisect between them:")
    out = [Text(line) for line in lines]
    if result.bisect:
        out.append(Text(result.bisect, no_wrap=True))
    if result.bisect_note:
        out.append(Text(result.bisect_note))
    return out


@click.command()
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", default=None,
              type=click.Choice(["hf-trainer", "tensorboard", "lightning-csv", "wandb-csv", "audiocraft"]),
              help="The log's format (default: detected from what RUN holds).")
@click.option("--golden", default=None, metavar="PATH", help="The golden batch to put in the printed bisect line.")
@click.option("--pipeline", default=None, metavar="SPEC", help="The pipeline to put in the printed bisect line.")
@click.option("--bisect", "run_bisect", is_flag=True,
              help="Then run the printed bisect line here (needs --golden; the pipeline is --pipeline, else the "
                   "project configuration's or the golden's, as for `signalchain bisect`). Its findings print on "
                   "the terminal; --json/--html stay the history report.")
@common_options()
@guarded
def history(run: str, fmt: str | None, golden: str | None, pipeline: str | None, run_bisect: bool,
            json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Diagnose a finished or failed run from its logs (HF Trainer, TensorBoard, Lightning CSV, W&B CSV,
    AudioCraft) and checkpoints, without re-running it.

    RUN is the run's output folder or log file: an HF Trainer `output_dir` (trainer_state.json,
    checkpoint-N/), a TensorBoard log folder, a Lightning CSVLogger version folder (metrics.csv), a
    W&B history CSV, or an AudioCraft/Dora experiment folder (history.json). Names the step where each
    problem first shows, the checkpoints around the first bad step, and the `signalchain bisect
    --checkpoints` line that finds the first bad checkpoint between them.
    """
    from ..history import HistoryReadError
    from ..history.run import diagnose

    con = console()
    if run_bisect and not golden:  # before anything is read: the line cannot run on a placeholder
        raise UsageError("--bisect runs the printed line on a golden batch: give --golden PATH (make one with "
                         "`signalchain capture PIPELINE --out GOLDEN`)")
    need_path(run, option="RUN", expect="a run's output folder or log file")
    try:
        result = diagnose(run, golden=golden, pipeline=pipeline, fmt=fmt)
    except HistoryReadError as exc:
        raise UsageError(str(exc)) from None
    done = f"read {plural(len(result.run.sources), 'file')}, {result.run.points():,} points, in {elapsed():.1f} s"
    title = f"history · {result.run.root}"
    doc = result.to_dict()
    code = emit(con, result.findings, title=title, show=[_summary(result), *_pair(result), done],
                json_path=json_path, fields={"history": doc["history"], "bisect": doc["bisect"]},
                html_path=html_path, page=lambda: __import__(
                    "signalchain.report.history_page", fromlist=["render_history"]).render_history(result))
    return max(code, _bisect_now(con, result, golden)) if run_bisect else code


def _bisect_now(con: Any, result: Any, golden: str) -> int:
    """Run the printed line with the function `signalchain bisect --checkpoints` runs; its exit code."""
    plan = result.plan
    if plan is None:
        con.print(f"--bisect: no line to run ({result.bisect_note})", markup=False)
        return 0
    from . import _bisect_checkpoints
    from .bisect_cmd import bisect

    defaults = {p.name: p.default for p in bisect.params}  # the bisect command's own, so the two never differ
    con.print(f"running: {result.bisect}", markup=False)
    return _bisect_checkpoints.run_checkpoints_mode(
        con=con, golden=golden, checkpoints=plan.folder, pipeline=plan.pipeline, rtol=defaults["rtol"],
        atol=defaults["atol"], tols=(), json_path=None, html_path=None, factor=defaults["factor"],
        step_range=plan.steps)
