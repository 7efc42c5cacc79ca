"""`bisect`: find the first commit (or checkpoint) whose golden run diverges where the bad one does.

    signalchain bisect GOLDEN --good REV --bad REV [--repo DIR] [--pipeline SPEC]
    signalchain bisect GOLDEN --checkpoints DIR_OR_GLOB [--pipeline SPEC | --hf-musicgen DIR --data DATA]

The pipeline is the one named here, else the project configuration's ([tool.signalchain]); over
commits never the golden's (a golden is data, never code).

Each probed commit runs in a temporary worktree and its own process; the user's work tree is never
touched. Every bad option is a usage error (exit 2, one line), found before anything slow runs.
Exit 1 when a first bad commit is named (an error finding), 0 when the ends are flaky or the
answer is ambiguous (warnings).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import click

from ..checks.bisect import judge_bisect
from ..errors import UsageError
from ..experiments.bisect._git import repo_root
from ..experiments.bisect.commits import bisect_commits, default_cache
from ..golden import Tolerance, load_golden
from ..report import console
from ..report.progress import Reporter
from ._bisect_view import print_outcome, render_bisect
from ._common import BUILTIN_PIPELINES, common_options, emit, guarded, hf_options
from ._paths import need_path, need_writable
from ._project import project_config
from .golden_cmds import parse_stage_tolerances

__all__ = ["bisect"]


def _tolerance(option: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{option} {value!r} is not a tolerance: give a finite number >= 0 (e.g. 1e-5)")
    return value


def _check_modes(good: str | None, bad: str | None, repo: str | None, checkpoints: str | None) -> None:
    if checkpoints is not None:
        given = [name for name, v in (("--good", good), ("--bad", bad), ("--repo", repo)) if v is not None]
        if given:
            raise UsageError(f"--checkpoints bisects checkpoints; {', '.join(given)} go with commits: give one or "
                             "the other")
        return
    missing = [name for name, v in (("--good", good), ("--bad", bad)) if not v]
    if missing:
        raise UsageError(f"bisect needs {' and '.join(missing)} (commits: --good REV --bad REV), or --checkpoints "
                         "DIR_OR_GLOB")


def _commit_spec(pipeline: str | None, hf_musicgen: str | None, data: tuple[str, ...],
                 hf_set: tuple[str, ...]) -> tuple[str, str, str]:
    """The pipeline to run at each commit, as a person named it, and where its name came from: --pipeline,
    else the project configuration's; never the golden's (a golden is data, never code), as everywhere."""
    hf_why = ("runs signalchain's own HF pipeline on a saved model, which no commit of your repository changes: "
              "bisect its checkpoints with --checkpoints DIR_OR_GLOB, or name your repository's pipeline with "
              "--pipeline SPEC")
    if hf_musicgen is not None or data or hf_set:
        raise UsageError(f"bisect over commits with --hf-musicgen {hf_why}")
    if pipeline:
        return pipeline, pipeline, "--pipeline"
    cfg = project_config()
    if cfg is not None and cfg.hf_musicgen is not None:
        raise UsageError(f"{cfg.where} names hf_musicgen: bisect over commits {hf_why}")
    if cfg is not None and cfg.pipeline_spec is not None:
        return cfg.pipeline_spec, str(cfg.pipeline), cfg.where
    raise UsageError("bisect runs the pipeline you name, never the golden's: pass --pipeline SPEC "
                     "(path/to/file.py:attr or package.module:attr), or set pipeline = \"path/to/file.py:attr\" "
                     "under [tool.signalchain] in your pyproject.toml (or in signalchain.toml)")


@click.command()
@click.argument("golden")
@click.option("--good", default=None, metavar="REV", help="A commit whose run matches the golden.")
@click.option("--bad", default=None, metavar="REV", help="A later commit whose run diverges from it.")
@click.option("--repo", default=None, metavar="DIR", help="The git repository to bisect (default: the current folder).")
@click.option("--checkpoints", default=None, metavar="DIR_OR_GLOB",
              help="Bisect saved checkpoints instead of commits (not with --good/--bad/--repo).")
@click.option("--pipeline", default=None, metavar="SPEC",
              help="Pipeline to run at each commit (default: the project configuration's, never the golden's); a "
                   "relative file is the commit's.")
@click.option("--rtol", type=float, default=1e-5, show_default=True, help="Relative tolerance for floats.")
@click.option("--atol", type=float, default=1e-6, show_default=True, help="Absolute tolerance for floats.")
@click.option("--tol", "tols", multiple=True, metavar="STAGE=RTOL[,ATOL]", help="Per-stage tolerance; repeatable.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds one golden run may take; a slower commit is skipped.")
@click.option("--cache", "cache_dir", default=None, metavar="DIR",
              help="Where per-commit results are kept (default: <git dir>/signalchain-bisect).")
@click.option("--no-cache", is_flag=True, help="Run every probed commit again; keep nothing.")
@click.option("--steps", "step_range", default=None, metavar="FIRST:LAST",
              help="Checkpoints: keep only those whose step is in FIRST..LAST (either may be empty), e.g. the pair "
                   "`signalchain history` names.")
@click.option("--factor", type=float, default=10.0, show_default=True,
              help="Checkpoints: how many times the good end's value a statistic may reach and still be healthy.")
@hf_options
@common_options()
@guarded
def bisect(golden: str, good: str | None, bad: str | None, repo: str | None, checkpoints: str | None,
           pipeline: str | None, rtol: float, atol: float, tols: tuple[str, ...], timeout: float,
           cache_dir: str | None, no_cache: bool, step_range: str | None, factor: float, hf_musicgen: str | None,
           data: tuple[str, ...], hf_set: tuple[str, ...], json_path: str | None, html_path: str | None,
           debug: bool) -> int:
    """Find the first commit between --good and --bad whose golden run diverges where --bad's does.

    Both ends are re-run first: an end that does not behave as claimed is reported as flaky and
    nothing is bisected. A commit that cannot import or run is skipped. Results are cached per
    commit, so a second bisect over an overlapping range is cheap.
    """
    con = console()
    _tolerance("--rtol", rtol)
    _tolerance("--atol", atol)
    _check_modes(good, bad, repo, checkpoints)
    if step_range is not None and checkpoints is None:
        raise UsageError("--steps selects checkpoints: give it with --checkpoints DIR_OR_GLOB")
    project_config()  # a bad configuration is named before anything else
    if checkpoints is not None:
        from ._bisect_checkpoints import run_checkpoints_mode  # the checkpoint engineer's module

        return run_checkpoints_mode(con=con, golden=golden, checkpoints=checkpoints, pipeline=pipeline, rtol=rtol,
                                    atol=atol, tols=tols, json_path=json_path, html_path=html_path,
                                    factor=factor, hf=(hf_musicgen, data, hf_set), step_range=step_range)
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout {timeout!r} is not a duration: give seconds > 0 (e.g. 600)")
    if cache_dir and no_cache:
        raise UsageError("give --cache DIR or --no-cache, not both")
    if cache_dir:  # a folder, or one to make: never found to be a file after the ends were re-run
        (need_path(cache_dir, option="--cache", want="folder") if os.path.lexists(cache_dir)
         else need_writable(cache_dir, option="--cache"))
    root = repo_root(repo or ".")
    g = load_golden(golden)
    per_stage = parse_stage_tolerances(tols, g.trace, atol)
    spec, shown, source = _commit_spec(pipeline, hf_musicgen, data, hf_set)
    spec = BUILTIN_PIPELINES.get(spec, spec)
    seed = int(g.provenance.get("seed") or 0)
    cache = None if no_cache else (Path(cache_dir).resolve() if cache_dir else default_cache(root))
    con.print(f"bisecting {root} from {good} (good) to {bad} (bad): pipeline {shown} (from {source}), seed {seed}, "
              f"cache {cache or 'off'}", markup=False)
    with Reporter("bisect") as rep:  # a bar on a terminal, timed lines in a log
        rep.say("preparing the bisect")
        outcome = bisect_commits(g, root, str(good), str(bad), spec, seed=seed, tolerance=Tolerance(rtol, atol),
                                 per_stage=per_stage, cache=cache, timeout=timeout, spec_from_manifest=False,
                                 progress=rep.say)
    findings = judge_bisect(outcome)
    print_outcome(outcome, con)
    return emit(con, findings, title="Findings", json_path=json_path, html_path=html_path,
                fields=dict(golden=str(g.path), bisect=outcome.to_dict(), pipeline={"spec": spec, "source": source}),
                page=lambda: render_bisect(outcome, findings, {"pipeline": spec, "seed": seed}))
