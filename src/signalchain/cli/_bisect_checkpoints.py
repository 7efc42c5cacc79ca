"""`signalchain bisect GOLDEN --checkpoints DIR_OR_GLOB`: the first unhealthy checkpoint of a run.

The `bisect` command calls `run_checkpoints_mode` when `--checkpoints` is given. Usage errors
(no checkpoint matched, one only, a bad tolerance or factor, an unloadable pipeline) raise
`UsageError` before anything slow runs; the command's guard turns them into one line and exit 2.
Exit 1 when a first bad checkpoint is named, 0 otherwise (flaky, ambiguous, nothing to bisect).
"""

from __future__ import annotations

import glob
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..checks.checkpoints import DEFAULT_FACTOR, bisect_findings, describe_reason, judge_change
from ..errors import PipelineError, UsageError
from ..experiments.bisect._checkpoint_files import SUFFIXES, find_checkpoints, in_step_range
from ..experiments.bisect.checkpoints import bisect_checkpoints
from ..golden import Golden, Tolerance, load_golden, load_manifest_pipeline, manifest_pipeline_spec
from ..records.checkpoints import CheckpointBisect, CheckpointHealth
from ..report.bisect_page import render_checkpoints
from ..report.describe import fmt
from ..report.progress import Reporter
from ._common import BUILTIN_PIPELINES, DEFAULT_PIPELINE, emit, resolve
from ._paths import need_path
from .golden_cmds import parse_stage_tolerances

__all__ = ["run_checkpoints_mode", "parse_step_range"]

_ROWS = ("lr", "weight_norm", "step", "exp_avg.max", "exp_avg.rms", "exp_avg_sq.max", "exp_avg_sq.mean",
         "exp_avg_sq.finite", "grad_norm", "update_ratio")


def _check_number(option: str, value: float, low: float, strict: bool = False) -> None:
    if isinstance(value, bool) or not math.isfinite(value) or value < low or (strict and value == low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise UsageError(f"{option} {value!r} is not valid: give a finite number {bound}")


def _pipeline(g: Golden, spec: str | None, hf: tuple[Any, Any, Any] = (None, (), ())) -> tuple[Any, str, str]:
    """--pipeline or --hf-musicgen, else the project configuration's, else the golden's when it names an
    importable module (as `compare`)."""
    chosen = resolve(spec, (), *hf, default=False)
    if chosen is not None:
        source = chosen.source if chosen.source != "the command line" else ("--pipeline" if spec else "--hf-musicgen")
        return chosen.pipeline, chosen.spec, source
    spec = manifest_pipeline_spec(g.provenance.get("pipeline_spec"), g.path, DEFAULT_PIPELINE, BUILTIN_PIPELINES)
    return load_manifest_pipeline(spec), spec, "the golden's manifest"


def _golden_loss(g: Golden) -> float | None:
    rec = g.trace.get("loss")
    value = rec.summary.get("value") if rec is not None else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _verdict(p: CheckpointHealth) -> str:
    if not p.loaded:
        return "[dim]skipped[/dim]"
    return "[green]healthy[/green]" if p.healthy else "[red]unhealthy[/red]"


def _probe_table(res: CheckpointBisect) -> Table:
    t = Table(title=f"Checkpoint probes ({res.runs} golden runs for {len(res.checkpoints)} checkpoints)")
    for col in ("#", "checkpoint", "step", "verdict", "loss", "grad norm", "why"):
        t.add_column(col, overflow="fold")
    base = next((p.name for p in res.probes if p.loaded), "the good end")
    for n, p in enumerate(res.probes, 1):
        why = p.skip_reason if not p.loaded else (
            describe_reason(p.reasons[0], "the golden" if p.name == base else base) if p.reasons else "")
        t.add_row(str(n), p.name, fmt(p.step), _verdict(p), fmt(p.loss), fmt(p.grad_norm), why or "")
    return t


def _group_table(res: CheckpointBisect) -> Table | None:
    if res.pair is None:
        return None
    a, b = res.pair.a, res.pair.b
    t = Table(title=f"Param groups: {a.name} (last healthy) → {b.name} (first unhealthy)")
    t.add_column("statistic")
    names = [g.name for g in b.groups]
    for name in names:
        t.add_column(name, overflow="fold")
    for stat in _ROWS:
        cells = []
        for name in names:
            ga, gb = a.group(name), b.group(name)
            va, vb = (ga.stat(stat) if ga else None), (gb.stat(stat) if gb else None)
            cells.append(f"{fmt(va)} → {fmt(vb)}")
        if any(c != "— → —" for c in cells):
            t.add_row(stat, *cells)
    t.add_row("drift |Δθ|/|θ|", *[fmt(res.pair.drift.get(n)) for n in names])
    return t


def _json(res: CheckpointBisect, changes: list[Any]) -> dict[str, Any]:
    name = res.checkpoints.__getitem__
    return {"mode": "checkpoints", "status": res.status,
            "last_healthy": name(res.last_healthy) if res.last_healthy is not None else None,
            "first_unhealthy": name(res.first_unhealthy) if res.first_unhealthy is not None else None,
            "runs": res.runs, "factor": res.factor, "golden_loss": res.golden_loss, "checkpoints": res.checkpoints,
            "probes": [p.to_dict() for p in res.probes],
            "groups": res.pair.group_table() if res.pair is not None else [],
            "changes": [r.to_dict() for r in changes],
            "steps_between": res.pair.steps_between if res.pair is not None else None}


def parse_step_range(text: str) -> tuple[int | None, int | None]:
    """`FIRST:LAST` (either side may be empty) -> (first, last); a usage error names the value otherwise."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        first, last = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise UsageError(f"--steps {text!r} is not a step range: give FIRST:LAST, e.g. 200:400 or 200:") from None
    if first is not None and last is not None and first > last:
        raise UsageError(f"--steps {text!r}: the first step is after the last")
    return first, last


def run_checkpoints_mode(*, con: Console, golden: str, checkpoints: str, pipeline: str | None, rtol: float,
                         atol: float, tols: Sequence[str], json_path: str | None, html_path: str | None,
                         factor: float = DEFAULT_FACTOR, hf: tuple[Any, Any, Any] = (None, (), ()),
                         step_range: str | None = None) -> int:
    """Bisect the checkpoints matching `checkpoints` on GOLDEN's batch; print, write --json, return the exit code."""
    _check_number("--rtol", rtol, 0.0)
    _check_number("--atol", atol, 0.0)
    _check_number("--factor", factor, 1.0, strict=True)
    g = load_golden(golden)
    per_stage = parse_stage_tolerances(tols, g.trace, atol)
    kinds = f"a folder or a glob of {'/'.join(SUFFIXES)} files or checkpoint-N/ folders"
    if not glob.has_magic(checkpoints):
        need_path(checkpoints, option="--checkpoints", expect=kinds)
    files = find_checkpoints(checkpoints)
    if step_range is not None:
        first, last = parse_step_range(step_range)
        files = in_step_range(files, first, last)
    if len(files) < 2:
        what = "no checkpoint" if not files else f"only {files[0].name}"
        within = f" with --steps {step_range}" if step_range is not None else ""
        raise UsageError(f"--checkpoints {checkpoints!r}{within} matched {what}; bisect needs at least two: {kinds}")
    try:
        pipe, spec, source = _pipeline(g, pipeline, hf)
    except SystemExit as exc:
        raise PipelineError(f"the pipeline exited (SystemExit {exc.code!r}) while loading; "
                            "nothing was bisected") from None
    seed = int(g.provenance.get("seed") or 0)
    con.print(f"bisecting {len(files)} checkpoints ({files[0].name} … {files[-1].name}) with pipeline {spec} "
              f"(from {source}) on the golden batch, seed {seed}, factor {factor:g}", markup=False)
    try:
        with Reporter("bisect") as rep:  # a bar on a terminal, timed lines in a log
            res = bisect_checkpoints(pipe, files, seed=seed, golden=g.trace, golden_loss=_golden_loss(g),
                                     factor=factor, tolerance=Tolerance(rtol, atol), per_stage=per_stage,
                                     progress=rep.status)
    except SystemExit as exc:
        raise PipelineError(f"the pipeline exited (SystemExit {exc.code!r}) during a probe; "
                            "nothing was bisected") from None
    if res.probes and not any(p.loaded for p in res.probes):  # a folder of files that are not checkpoints (for it)
        raise UsageError(f"--checkpoints {checkpoints!r}: none of its {len(files)} checkpoints loads (first: "
                         f"{res.probes[0].skip_reason}); nothing to bisect: give {kinds}")
    changes = judge_change(res.pair, factor) if res.pair is not None else []
    findings = bisect_findings(res, changes)
    con.print(_probe_table(res))
    groups = _group_table(res)
    if groups is not None:
        con.print(groups)
    return emit(con, findings, title="Findings", json_path=json_path, html_path=html_path,
                page=lambda: render_checkpoints(res, findings, f"pipeline {spec} · golden {g.path} · seed {seed}"),
                rendering="rendering HTML…",
                fields={"bisect": _json(res, changes), "golden": str(g.path),
                        "pipeline": {"spec": spec, "source": source, "seed": seed}})
