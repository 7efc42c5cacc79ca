"""`bisect`: find the first commit (or checkpoint) whose golden run diverges where the bad one does.

    signalchain bisect GOLDEN --good REV --bad REV [--repo DIR] [--pipeline SPEC]
    signalchain bisect GOLDEN --checkpoints DIR_OR_GLOB [--pipeline SPEC]

Each probed commit runs in a temporary worktree and its own process; the user's work tree is never
touched. Every bad option is a usage error (exit 2, one line), found before anything slow runs.
Exit 1 when a first bad commit is named (an error finding), 0 when the ends are flaky or the
answer is ambiguous (warnings).
"""

from __future__ import annotations

import math
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
from ._common import BUILTIN_PIPELINES, common_options, emit, guarded
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


@click.command()
@click.argument("golden")
@click.option("--good", default=None, metavar="REV", help="A commit whose run matches the golden.")
@click.option("--bad", default=None, metavar="REV", help="A later commit whose run diverges from it.")
@click.option("--repo", default=None, metavar="DIR", help="The git repository to bisect (default: the current folder).")
@click.option("--checkpoints", default=None, metavar="DIR_OR_GLOB",
              help="Bisect saved checkpoints instead of commits (not with --good/--bad/--repo).")
@click.option("--pipeline", default=None, metavar="SPEC",
              help="Pipeline to run at each commit (default: the golden's); a relative file is the commit's.")
@click.option("--rtol", type=float, default=1e-5, show_default=True, help="Relative tolerance for floats.")
@click.option("--atol", type=float, default=1e-6, show_default=True, help="Absolute tolerance for floats.")
@click.option("--tol", "tols", multiple=True, metavar="STAGE=RTOL[,ATOL]", help="Per-stage tolerance; repeatable.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds one golden run may take; a slower commit is skipped.")
@click.option("--cache", "cache_dir", default=None, metavar="DIR",
              help="Where per-commit results are kept (default: <git dir>/signalchain-bisect).")
@click.option("--no-cache", is_flag=True, help="Run every probed commit again; keep nothing.")
@click.option("--factor", type=float, default=10.0, show_default=True,
              help="Checkpoints: how many times the good end's value a statistic may reach and still be healthy.")
@common_options()
@guarded
def bisect(golden: str, good: str | None, bad: str | None, repo: str | None, checkpoints: str | None,
           pipeline: str | None, rtol: float, atol: float, tols: tuple[str, ...], timeout: float,
           cache_dir: str | None, no_cache: bool, factor: float, json_path: str | None, html_path: str | None,
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
    if checkpoints is not None:
        from ._bisect_checkpoints import run_checkpoints_mode  # the checkpoint engineer's module

        return run_checkpoints_mode(con=con, golden=golden, checkpoints=checkpoints, pipeline=pipeline, rtol=rtol,
                                    atol=atol, tols=tols, json_path=json_path, html_path=html_path,
                                    factor=factor)
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout {timeout!r} is not a duration: give seconds > 0 (e.g. 600)")
    if cache_dir and no_cache:
        raise UsageError("give --cache DIR or --no-cache, not both")
    root = repo_root(repo or ".")
    g = load_golden(golden)
    per_stage = parse_stage_tolerances(tols, g.trace, atol)
    from_manifest = pipeline is None
    spec = pipeline or g.provenance.get("pipeline_spec")
    if not isinstance(spec, str) or not spec:
        raise UsageError(f"the golden {golden} names no pipeline; pass --pipeline SPEC (package.module:attr or "
                         "path/to/file.py:attr)")
    spec = BUILTIN_PIPELINES.get(spec, spec)
    seed = int(g.provenance.get("seed") or 0)
    cache = None if no_cache else (Path(cache_dir).resolve() if cache_dir else default_cache(root))
    con.print(f"bisecting {root} from {good} (good) to {bad} (bad): pipeline {spec} "
              f"(from {'the golden' if from_manifest else '--pipeline'}), seed {seed}, "
              f"cache {cache or 'off'}")
    with Reporter("bisect") as rep:  # a bar on a terminal, timed lines in a log
        rep.say("preparing the bisect")
        outcome = bisect_commits(g, root, str(good), str(bad), spec, seed=seed, tolerance=Tolerance(rtol, atol),
                                 per_stage=per_stage, cache=cache, timeout=timeout, spec_from_manifest=from_manifest,
                                 progress=rep.say)
    findings = judge_bisect(outcome)
    print_outcome(outcome, con)
    return emit(con, findings, title="Findings", json_path=json_path, html_path=html_path,
                fields=dict(golden=str(g.path), bisect=outcome.to_dict()),
                page=lambda: render_bisect(outcome, findings, {"pipeline": spec, "seed": seed}))
