"""`signalchain verify`: confirm that a fix solved the right problem (the method's three tests)."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ..experiments.names import PRESETS, SYMPTOMS
from ..pipeline import ProtocolView
from ..report import console
from ..report.progress import Reporter
from ._clock import elapsed
from ._common import common_options, emit, guarded, hf_options, resolve, shield_exits
from ._project import option_or_config, project_config
from .golden_cmds import inject_faults as with_faults

__all__ = ["verify", "INCONCLUSIVE_EXIT"]

_MAX_SEEDS = 50
#: `verify`'s exit status when a test could not run (no control judged anything, or a step that found the
#: failure did not run on the fix): 0 fixed, 1 not fixed, 2 usage or internal error, 3 inconclusive.
INCONCLUSIVE_EXIT = 3


def _configured_spec(repo: str | None) -> str | None:
    """The project configuration's pipeline, as the commit's worktree names it (a file inside the repository
    relative to its top); None without one. A saved HF MusicGen is not code a commit changes: refused."""
    cfg = project_config()
    if cfg is None or not cfg.has_pipeline:
        return None
    if cfg.pipeline_spec is None:
        raise UsageError(f"{cfg.where} names a saved HF MusicGen (hf_musicgen), which no commit changes: verify "
                         "commits with --before SPEC naming your repository's pipeline, or checkpoints with "
                         "--before-checkpoint/--after-checkpoint")
    from ..experiments.bisect._git import repo_root
    from ..experiments.bisect.commits import worker_spec

    return worker_spec(cfg.pipeline_spec, repo_root(repo or "."), "", from_manifest=False)


@click.command()
@click.option("--before", "before_spec", default=None, metavar="SPEC",
              help="The failing state: a pipeline as doctor's (default: the project configuration's, else the "
                   "reference; hf-bed; pkg.mod:attr; path/file.py:attr).")
@click.option("--before-fault", "before_faults", multiple=True, metavar="NAME",
              help="Inject a catalogue fault into the failing state (repeatable).")
@click.option("--after", "after_spec", default=None, metavar="SPEC",
              help="The fixed state (same forms as --before; default: --before's pipeline).")
@click.option("--after-fault", "after_faults", multiple=True, metavar="NAME",
              help="Inject a catalogue fault into the fixed state (repeatable).")
@click.option("--repo", default=None, metavar="DIR",
              help="With --before-rev/--after-rev: the git repository (default: the current folder).")
@click.option("--before-rev", default=None, metavar="REV",
              help="The failing state is --before's pipeline as commit REV has it (run in a worktree).")
@click.option("--after-rev", default=None, metavar="REV", help="The fixed state at commit REV (as --before-rev).")
@click.option("--before-checkpoint", default=None, metavar="PATH",
              help="The failing state's models start from this checkpoint (weights and optimizer state).")
@click.option("--after-checkpoint", default=None, metavar="PATH", help="The fixed state's checkpoint.")
@click.option("--symptom", type=click.Choice(list(SYMPTOMS)), default=None,
              help="The failure the fix is meant to remove; selects the families (as doctor's).")
@click.option("--family", "families", multiple=True, metavar="F", help="Run this family (repeatable).")
@click.option("--control", "control", multiple=True, metavar="FAMILY",
              help="A family the fix must not break (repeatable; default: cheap families outside the symptom's "
                   "set: conditioning, numerics, audio; 'none' for no control).")
@click.option("--seeds", type=int, default=3, show_default=True, help="Run seeds 0..N-1.")
@click.option("--budget", type=click.Choice(list(PRESETS)), default="economy", show_default=True,
              help="How many steps the experiments may take (as doctor's).")
@hf_options
@common_options()
@guarded
def verify(before_spec: str | None, before_faults: tuple[str, ...], after_spec: str | None,
           after_faults: tuple[str, ...], repo: str | None, before_rev: str | None, after_rev: str | None,
           before_checkpoint: str | None, after_checkpoint: str | None, symptom: str | None,
           families: tuple[str, ...], control: tuple[str, ...], seeds: int, budget: str, hf_musicgen: str | None,
           data: tuple[str, ...], hf_set: tuple[str, ...], json_path: str | None, html_path: str | None,
           debug: bool) -> int:
    """Confirm that a fix solved the right problem: run the --symptom's families (or --family) on the failing
    state (--before, --before-fault) and the fixed one (--after, --after-fault) over --seeds seeds, and test that
    (1) every error of the failing state is gone and the symptom's measure improved, (2) the control families
    show no new error, (3) the verdict holds on every seed. Exit 0 fixed, 1 not fixed (an error finding: the
    failure persists, the control regressed, or it does not reproduce), 2 usage, 3 inconclusive (a warning: a test
    could not run, e.g. no control family could judge anything on this pipeline; nothing is confirmed)."""
    from ..checks.verify import judge_verify, verdict_of  # here: they bring torch, and `--help` stays cheap
    from ..experiments.doctor import select_families
    from ..experiments.verify import PipelineState, run_verify
    from ..experiments.verify_states import CheckpointPipeline, CommitState, checkpoint_file
    from ..report.verify_page import render_verify, verify_json, verify_lines, verify_table

    con = console()
    if not 1 <= seeds <= _MAX_SEEDS:
        raise UsageError(f"--seeds {seeds} is not a number of seeds: give 1 to {_MAX_SEEDS} (3 is the default)")
    if symptom is None and not families:
        raise UsageError("verify needs --symptom S or --family F: which failure is the fix meant to remove?")
    select_families(families, symptom)  # fail fast on a bad name
    controls = None if not control else ([] if list(control) == ["none"] else list(control))
    if controls:
        select_families(controls)
    if repo is not None and not (before_rev or after_rev):
        raise UsageError("--repo goes with --before-rev/--after-rev (the commits to verify)")
    if hf_musicgen is not None and (before_spec or after_spec or before_rev or after_rev):
        raise UsageError("--hf-musicgen names the pipeline of both states (with --before-checkpoint/"
                         "--after-checkpoint): give it or --before/--after/--before-rev/--after-rev, not both")
    budget = option_or_config("budget", budget)
    after_spec = after_spec or before_spec  # the same code, without the fault, at another commit or checkpoint
    sides, chosen, lines = [], {}, []
    for side, spec, faults, rev, ckpt in (("before", before_spec, before_faults, before_rev, before_checkpoint),
                                          ("after", after_spec, after_faults, after_rev, after_checkpoint)):
        if rev is not None:
            if faults or ckpt:
                raise UsageError(f"--{side}-rev runs the commit's own code: --{side}-fault and --{side}-checkpoint "
                                 "go with a pipeline state, not a commit")
            spec = spec or before_spec or after_spec or _configured_spec(repo)
            if not spec:
                raise UsageError(f"--{side}-rev needs the pipeline to run at that commit: --{side} SPEC "
                                 "(e.g. path/in/repo.py:attr), or pipeline = \"path/in/repo.py:attr\" under "
                                 "[tool.signalchain] in pyproject.toml")
            sides.append(CommitState(repo or ".", rev, spec, f"--{side}-rev", budget))
            continue
        r = resolve(spec, (), *((hf_musicgen, data, hf_set) if spec is None else (None, (), ())))
        assert r is not None
        lines.append(f"{side}: {r.line}")  # said once both sides load: a bad second side is one line alone
        chosen[side] = r.record
        pipe, name = with_faults(r.pipeline, r.spec, faults), r.spec  # an unknown fault is a usage error, named now
        name += "".join(f" +{f}" for f in faults)
        if ckpt is not None:
            pipe = CheckpointPipeline(pipe, checkpoint_file(ckpt, f"--{side}-checkpoint", pipe))
            name += f" @{Path(ckpt).name}"
        sides.append((ProtocolView(shield_exits(pipe)), name))
    for line in lines:
        con.print(line, markup=False)
    with Reporter("verify") as rep:  # a bar on a terminal, timed lines in a log
        before, after = (s if isinstance(s, CommitState) else PipelineState(s[0], s[1], budget, progress=rep.say)
                         for s in sides)
        m = run_verify(before, after, symptom=symptom, families=families, control=controls,
                       seeds=range(seeds), budget=budget, progress=rep.say)
    seconds = elapsed()  # wall time from the command's start (loading both states included)
    findings = judge_verify(m)
    v = verdict_of(m)
    # inconclusive is neither a pass (0 would let `verify && merge` through on absent evidence) nor an error
    # finding (nothing was shown wrong): its own code, so that a script can tell it apart
    code = INCONCLUSIVE_EXIT if v.verdict == "inconclusive" else None
    return emit(con, findings, title=f"verify · {v.verdict}", show=[verify_table(m, v), *verify_lines(m, v),
                                                                   f"{seconds:.1f} s"],
                json_path=json_path,
                fields=dict(verify=verify_json(m, v), pipelines=chosen, seconds=round(seconds, 2)),
                html_path=html_path, page=lambda: render_verify(findings, m, v, seconds), code=code)
