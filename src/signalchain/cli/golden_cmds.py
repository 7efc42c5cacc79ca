"""`capture`, `compare`, `inspect`: the golden batch on the command line.

A golden is data, never code: `compare` re-runs the pipeline named with `--pipeline`, or the
manifest's spec only when it is an importable module (`golden/replay.py`), and says which it ran.
Every bad option is a usage error (exit 2, one line), checked before anything slow runs.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ..checks.golden import divergence_findings
from ..errors import PipelineError, UsageError
from ..experiments.capture import run_golden
from ..findings import Finding, Severity
from ..golden import (
    Golden,
    Tolerance,
    check_target,
    collect_provenance,
    compare_traces,
    load_golden,
    load_manifest_pipeline,
    manifest_pipeline_spec,
    save_golden,
)
from ..pipeline import Pipeline, capabilities
from ..report import (
    console,
    print_comparison,
    print_trace,
)
from ..report.progress import Reporter
from ..trace import Trace
from ._common import (
    BUILTIN_PIPELINES,
    DEFAULT_PIPELINE,
    common_options,
    emit,
    guarded,
    hf_options,
    resolve,
)
from ._project import option_or_config, project_config

__all__ = ["capture", "compare", "inspect", "inject_faults", "parse_stage_tolerances"]


def render_compare(*args: Any, **kwargs: Any) -> Any:
    """The compare page, its module (matplotlib, the plots) imported only when --html asks for it."""
    from ..report import render_compare as render

    return render(*args, **kwargs)


def render_inspect(*args: Any, **kwargs: Any) -> Any:
    """The inspect page, imported only when --html asks for it."""
    from ..report import render_inspect as render

    return render(*args, **kwargs)

_MAX_SEED = 2**32 - 1  # numpy's seeds stop here

fault_option = click.option("--fault", "faults", multiple=True, metavar="NAME",
                            help="Inject a catalogue fault (reference pipeline); repeatable.")


def _check_seed(seed: int) -> int:
    if not 0 <= seed <= _MAX_SEED:
        raise UsageError(f"--seed {seed} is not a seed: give an integer from 0 to {_MAX_SEED}")
    return seed


def inject_faults(pipe: Pipeline, spec: str, faults: Sequence[str]) -> Pipeline:
    """The pipeline with catalogue faults injected; an unknown fault is a usage error, found now."""
    if not faults:
        return pipe
    if "with_faults" not in capabilities(pipe):
        raise UsageError(
            f"--fault needs a pipeline with with_faults(names), such as the reference pipeline; {spec!r} has none"
        )
    if "fault_catalogue" in capabilities(pipe):
        known = [str(f.get("name")) for f in pipe.fault_catalogue()]
        unknown = [f for f in faults if f not in known]
        if unknown:
            raise UsageError(f"unknown fault {unknown[0]!r}; {spec} knows {len(known)} faults "
                             f"(e.g. {', '.join(known[:4])}); `signalchain faults --list` lists them")
    try:
        return pipe.with_faults(list(faults))
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--fault {', '.join(faults)}: {exc}") from None


def _finite_tolerance(option: str, text: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{option} {text!r} is not a tolerance: give a finite number >= 0 (e.g. 1e-5)")
    return value


def parse_stage_tolerances(items: Sequence[str], golden: Trace, atol: float) -> dict[str, Tolerance]:
    """`STAGE=RTOL[,ATOL]` for stages of `golden`: one or two finite non-negative numbers each."""
    out: dict[str, Tolerance] = {}
    for item in items:
        stage, sep, vals = item.partition("=")
        parts = vals.split(",")
        if not sep or not stage or not 1 <= len(parts) <= 2:
            raise UsageError(f"--tol {item!r} is not STAGE=RTOL[,ATOL] (e.g. --tol logits=1e-3,1e-5)")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            raise UsageError(f"--tol {item!r} is not STAGE=RTOL[,ATOL] (e.g. --tol logits=1e-3,1e-5)") from None
        for text, value in zip(parts, numbers):
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"--tol {item!r}: {text!r} is not a tolerance; give finite numbers >= 0")
        if stage not in golden:
            raise UsageError(
                f"--tol {item!r}: the golden has no stage {stage!r}; its stages: {', '.join(golden.names())}"
            )
        if stage in out:
            raise UsageError(f"--tol gives stage {stage!r} twice")
        out[stage] = Tolerance(numbers[0], numbers[1] if len(numbers) > 1 else atol)
    return out


@click.command()
@click.argument("pipeline", required=False)
@click.option("--out", "out", default=None, metavar="DIR",
              help="Golden batch folder to write: a missing or empty folder, or an existing golden "
                   "(default: the project configuration's out).")
@click.option("--seed", type=int, default=0, show_default=True)
@fault_option
@hf_options
@common_options()
@guarded
def capture(pipeline: str | None, out: str | None, seed: int, faults: tuple[str, ...], hf_musicgen: str | None,
            data: tuple[str, ...], hf_set: tuple[str, ...], json_path: str | None, html_path: str | None,
            debug: bool) -> int:
    """Record the golden batch of PIPELINE with full values.

    PIPELINE defaults to the project's [tool.signalchain] pipeline, else the reference pipeline."""
    con = console()
    out, seed = option_or_config("out", out), option_or_config("seed", seed)
    if not out:
        raise UsageError("capture needs --out DIR (or out = \"DIR\" under [tool.signalchain] in pyproject.toml)")
    _check_seed(seed)
    check_target(out)  # before the run: refuse to overwrite what is not a golden
    chosen = resolve(pipeline, (), hf_musicgen, data, hf_set)
    assert chosen is not None
    pipe, spec = inject_faults(chosen.pipeline, chosen.spec, faults), chosen.spec
    con.print(chosen.line, markup=False)
    with Reporter("capture") as rep, rep.status(f"capturing the golden batch of {pipe.name} (seed {seed})"):
        run = run_golden(pipe, seed)
        prov = collect_provenance(pipe, spec=spec, seed=seed, faults=list(faults))
        path = save_golden(out, run.trace, prov)
    print_trace(run.trace, con, title=f"Golden batch of {pipe.name} → {path}")
    findings = list(run.trace.problems)
    code = emit(con, findings, title="Findings" if findings else None, json_path=json_path,
                fields=dict(golden=str(path), pipeline=chosen.record, stages=run.trace.to_dict()["stages"]),
                html_path=html_path,
                page=lambda: render_inspect(load_golden(path)), rendering="rendering HTML…")
    con.print(f"[green]saved[/green] {len(run.trace)} stages to {path}")
    return code


def _rerun(g: Golden, pipeline: str | None, faults: tuple[str, ...], con: Console,
           hf: tuple[str | None, tuple[str, ...], tuple[str, ...]] = (None, (), ())
           ) -> tuple[Trace, str, dict[str, Any]]:
    """Re-run the chosen pipeline on the golden batch (--pipeline or --hf-musicgen, else the project
    configuration's, else the manifest's when it is an importable module); say which one and why."""
    chosen = resolve(pipeline, (), *hf, default=False)
    if chosen is not None:
        pipe, spec, shown = chosen.pipeline, chosen.spec, chosen.shown
        source = chosen.source if chosen.source != "the command line" else (
            "--pipeline" if pipeline else "--hf-musicgen")
    else:
        source = "the golden's manifest"
        spec = manifest_pipeline_spec(g.provenance.get("pipeline_spec"), g.path, DEFAULT_PIPELINE, BUILTIN_PIPELINES)
        pipe, shown = load_manifest_pipeline(spec), spec
    pipe = inject_faults(pipe, spec, faults)
    seed = int(g.provenance.get("seed") or 0)
    captured = list(g.provenance.get("faults") or [])
    if captured and captured != list(faults):
        con.print(
            f"[yellow]note[/yellow]: the golden was captured with faults {captured}; "
            f"this run uses {list(faults) or 'none'}"
        )
    con.print(f"re-running pipeline {shown} (from {source}) on the golden batch, seed {seed}", markup=False)
    quiet = isinstance(con.file, io.StringIO)  # a caller's own buffer (the Python face): nothing on stderr
    with Reporter("compare", mode="off" if quiet else None) as rep, \
            rep.status(f"re-running {pipe.name} on the golden batch (seed {seed})"):
        trace = run_golden(pipe, seed).trace
    label = f"{pipe.name} now" + (f" with faults {', '.join(faults)}" if faults else "")
    return trace, label, {"spec": spec, "source": source, "seed": seed}


@click.command()
@click.argument("golden")
@click.argument("golden2", required=False)
@click.option("--pipeline", "pipeline", default=None,
              help="Pipeline to re-run (default: the project configuration's, else the golden's when it names an "
                   "importable module).")
@click.option("--rtol", type=float, default=1e-5, show_default=True, help="Relative tolerance for floats.")
@click.option("--atol", type=float, default=1e-6, show_default=True, help="Absolute tolerance for floats.")
@click.option("--tol", "tols", multiple=True, metavar="STAGE=RTOL[,ATOL]", help="Per-stage tolerance; repeatable.")
@fault_option
@hf_options
@common_options()
@guarded
def compare(golden: str, golden2: str | None, pipeline: str | None, rtol: float, atol: float,
            tols: tuple[str, ...], faults: tuple[str, ...], hf_musicgen: str | None, data: tuple[str, ...],
            hf_set: tuple[str, ...], json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Compare GOLDEN with GOLDEN2, or with a fresh run of the pipeline as the code is now.

    Exit 1 when they diverge; the first divergent stage is printed with the numbers that differ.
    """
    con = console()
    _finite_tolerance("--rtol", str(rtol), rtol)
    _finite_tolerance("--atol", str(atol), atol)
    if golden2 and (pipeline or faults or hf_musicgen or data or hf_set):
        raise UsageError("give either a second golden or a pipeline to re-run (--pipeline, --hf-musicgen, --fault), "
                         "not both")
    cfg = project_config() if not golden2 else None  # a bad configuration is named before anything else
    if (data or hf_set) and hf_musicgen is None and (cfg is None or cfg.hf_musicgen is None):
        raise UsageError("--data and --hf-set go with --hf-musicgen MODEL_DIR")
    if hf_musicgen is not None and not data:
        raise UsageError("--hf-musicgen needs --data: an audiofolder, an AudioCraft manifest or a folder of audio")
    g = load_golden(golden)
    per_stage = parse_stage_tolerances(tols, g.trace, atol)
    ran: dict[str, Any] = {}
    if golden2:
        new_trace, label = load_golden(golden2).trace, str(golden2)
    else:
        try:
            new_trace, label, ran = _rerun(g, pipeline, faults, con, (hf_musicgen, data, hf_set))
        except SystemExit as exc:  # a pipeline that exits must not pass for a clean comparison
            raise PipelineError(f"the pipeline exited (SystemExit {exc.code!r}) instead of running; "
                                "no comparison was made") from None
    comparison = compare_traces(g.trace, new_trace, Tolerance(rtol, atol), per_stage)
    findings: list[Finding] = divergence_findings(comparison)
    print_comparison(comparison, con)
    return emit(con, findings, json_path=json_path,
                fields=dict(comparison=comparison.to_dict(), golden=str(g.path), new=label, pipeline=ran or None),
                html_path=html_path, rendering="rendering HTML…",
                page=lambda: render_compare(comparison, g.trace, new_trace, g.provenance, findings, label))


@click.command()
@click.argument("golden")
@common_options()
@guarded
def inspect(golden: str, json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Show every stage of GOLDEN in pipeline order; --html adds pictures and audio players."""
    con = console()
    g = load_golden(golden)
    print_trace(g.trace, con, title=f"{g.provenance.get('pipeline')} golden batch · {Path(g.path)}")
    from ..checks.audio import judge_overshoot
    from ..checks.base import run_check

    findings = list(g.trace.problems) + run_check("checks.audio.judge_overshoot", judge_overshoot, g.trace)
    if not any(r.kind == "audio" for r in g.trace) and not g.renderings:
        findings.append(
            Finding(
                "inspect.no_audio",
                Severity.INFO,
                None,
                "the golden batch has no audio stage to listen to",
                hint="tap audio with a sample_rate= so that it can be heard",
                check="cli.inspect",
            )
        )
    return emit(con, findings, title="Findings" if findings else None, json_path=json_path,
                fields=dict(golden=str(g.path), provenance=g.provenance, stages=g.trace.to_dict()["stages"]),
                html_path=html_path, page=lambda: render_inspect(g), rendering="rendering HTML (figures and audio)…")
