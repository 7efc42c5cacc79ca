"""`capture`, `compare`, `inspect`: the golden batch on the command line."""

from __future__ import annotations

from pathlib import Path

import click

from ..checks.golden import divergence_findings
from ..errors import UsageError
from ..experiments.capture import run_golden
from ..findings import Finding, Severity, exit_code
from ..golden import Tolerance, collect_provenance, compare_traces, load_golden, save_golden
from ..report import (
    console,
    print_comparison,
    print_findings,
    print_trace,
    render_compare,
    render_inspect,
    write_json,
)
from ._common import common_options, guarded, hf_options, parse_tolerances, resolve_pipeline

__all__ = ["capture", "compare", "inspect"]

fault_option = click.option("--fault", "faults", multiple=True, metavar="NAME",
                            help="Inject a catalogue fault (reference pipeline); repeatable.")


@click.command()
@click.argument("pipeline", required=False)
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Golden batch folder to write.")
@click.option("--seed", type=int, default=0, show_default=True)
@fault_option
@hf_options
@common_options()
@guarded
def capture(pipeline: str | None, out: str, seed: int, faults: tuple[str, ...], hf_musicgen: str | None,
            data: tuple[str, ...], hf_set: tuple[str, ...], json_path: str | None, html_path: str | None,
            debug: bool) -> int:
    """Record the golden batch of PIPELINE (default: the reference pipeline) with full values."""
    con = console()
    pipe, spec = resolve_pipeline(pipeline, faults, hf_musicgen, data, hf_set)
    with con.status(f"capturing the golden batch of {pipe.name} (seed {seed})…"):
        run = run_golden(pipe, seed)
        prov = collect_provenance(pipe, spec=spec, seed=seed, faults=list(faults))
        path = save_golden(out, run.trace, prov)
    print_trace(run.trace, con, title=f"Golden batch of {pipe.name} → {path}")
    findings = list(run.trace.problems)
    if findings:
        print_findings(findings, con)
    if html_path:
        with con.status("rendering HTML…"):
            render_inspect(load_golden(path)).write(html_path)
        con.print(f"report: {html_path}")
    if json_path:
        write_json(json_path, findings, golden=str(path), stages=run.trace.to_dict()["stages"])
    con.print(f"[green]saved[/green] {len(run.trace)} stages to {path}")
    return exit_code(findings)


@click.command()
@click.argument("golden", type=click.Path(exists=True, file_okay=False))
@click.argument("golden2", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--pipeline", "pipeline", default=None, help="Pipeline to re-run (default: the one in the golden's provenance).")
@click.option("--rtol", type=float, default=1e-5, show_default=True, help="Relative tolerance for floats.")
@click.option("--atol", type=float, default=1e-6, show_default=True, help="Absolute tolerance for floats.")
@click.option("--tol", "tols", multiple=True, metavar="STAGE=RTOL[,ATOL]", help="Per-stage tolerance; repeatable.")
@fault_option
@common_options()
@guarded
def compare(golden: str, golden2: str | None, pipeline: str | None, rtol: float, atol: float,
            tols: tuple[str, ...], faults: tuple[str, ...], json_path: str | None, html_path: str | None,
            debug: bool) -> int:
    """Compare GOLDEN with GOLDEN2, or with a fresh run of the pipeline as the code is now.

    Exit 1 when they diverge; the first divergent stage is printed with the numbers that differ.
    """
    con = console()
    g = load_golden(golden)
    if golden2 and (pipeline or faults):
        raise UsageError("give either a second golden or --pipeline/--fault, not both")
    if golden2:
        new_trace, label = load_golden(golden2).trace, str(golden2)
    else:
        spec = pipeline or g.provenance.get("pipeline_spec")
        seed = int(g.provenance.get("seed") or 0)
        pipe, spec = resolve_pipeline(spec, faults)
        captured = list(g.provenance.get("faults") or [])
        if captured and captured != list(faults):
            con.print(f"[yellow]note[/yellow]: the golden was captured with faults {captured}; this run uses {list(faults) or 'none'}")
        with con.status(f"re-running {pipe.name} on the golden batch (seed {seed})…"):
            new_trace = run_golden(pipe, seed).trace
        label = f"{pipe.name} now" + (f" with faults {', '.join(faults)}" if faults else "")
    per_stage = {s: Tolerance(r, a if a is not None else atol) for s, (r, a) in parse_tolerances(tols).items()}
    comparison = compare_traces(g.trace, new_trace, Tolerance(rtol, atol), per_stage)
    findings: list[Finding] = divergence_findings(comparison)
    print_comparison(comparison, con)
    if json_path:
        write_json(json_path, findings, comparison=comparison.to_dict(), golden=str(g.path), new=label)
    if html_path:
        with con.status("rendering HTML…"):
            render_compare(comparison, g.trace, new_trace, g.provenance, findings, label).write(html_path)
        con.print(f"report: {html_path}")
    return exit_code(findings)


@click.command()
@click.argument("golden", type=click.Path(exists=True, file_okay=False))
@common_options()
@guarded
def inspect(golden: str, json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Show every stage of GOLDEN in pipeline order; --html adds pictures and audio players."""
    con = console()
    g = load_golden(golden)
    print_trace(g.trace, con, title=f"{g.provenance.get('pipeline')} golden batch · {Path(golden)}")
    findings = list(g.trace.problems)
    if not any(r.kind == "audio" for r in g.trace):
        findings.append(Finding("inspect.no_audio", Severity.INFO, None, "the golden batch has no audio stage to listen to",
                                hint="tap audio with a sample_rate= so that it can be heard", check="cli.inspect"))
    if findings:
        print_findings(findings, con)
    if html_path:
        with con.status("rendering HTML (figures and audio)…"):
            render_inspect(g).write(html_path)
        con.print(f"report: {html_path}")
    if json_path:
        write_json(json_path, findings, golden=str(g.path), provenance=g.provenance, stages=g.trace.to_dict()["stages"])
    return exit_code(findings)
