"""Bisect git commits on the golden batch: the first commit whose run diverges where the bad one does.

The items are GOOD, then `git rev-list --reverse --ancestry-path --first-parent GOOD..BAD` (BAD
last); `bisect_range` re-runs both ends first, then halves. The predicate needs the symptom: the
bad end's first divergent stage S. `bisect_range` probes the good end, then the bad end, then the
items between, so S is known from the second probe on; an item between is **bad** when its first
divergence is at S or at a stage before it in the golden's order, and **good** otherwise (a later,
benign divergence is noted in its probe record). The good end must reproduce the golden exactly.

Every run goes through `CommitRunner` (a temporary worktree and a worker process per commit, a
per-commit cache): the user's work tree is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SignalchainError, UsageError
from ...golden import Comparison, Golden, Tolerance, compare_traces
from ...records.bisect import BisectOutcome, BisectProbe
from . import _git
from ._runner import CommitRunner
from .search import Verdict, bisect_range

__all__ = ["bisect_commits", "worker_spec", "default_cache", "first_position"]

Progress = Callable[[str], None]


def default_cache(root: Path) -> Path:
    """`<git common dir>/signalchain-bisect/`: shared by every worktree, never in the work tree."""
    return _git.common_dir(root) / "signalchain-bisect"


def _is_path_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def worker_spec(spec: str, root: Path, bad: str, *, from_manifest: bool) -> str:
    """The spec as the worker sees it from the worktree's top: a file inside the repository becomes
    relative to it. A spec read from the golden (data, not code) must name a file or package of the
    repository itself, checked in BAD's tree without running anything; the user's own `--pipeline`
    may also name a file outside it (run as it is, with the commit's code on the path)."""
    if ":" not in spec:
        raise UsageError(f"pipeline {spec!r} has no ':attr'; name it as package.module:attr or path/to/file.py:attr")
    target, attr = spec.rsplit(":", 1)
    where = "the golden's pipeline spec" if from_manifest else "--pipeline"
    if _is_path_spec(target):
        path = Path(target).expanduser()
        if path.is_absolute():
            try:
                target = Path(path).resolve().relative_to(root).as_posix()
            except ValueError:
                if from_manifest:
                    raise UsageError(f"{where} {spec!r} is a file outside the repository {root}; pass --pipeline "
                                     "to say which pipeline to run at each commit") from None
                return spec
        elif from_manifest and ".." in Path(target).parts:
            raise UsageError(f"{where} {spec!r} leaves the repository; pass --pipeline to say which pipeline to run")
        return f"{target}:{attr}"
    top = target.split(".")[0]
    if from_manifest and not any(_git.tracked(root, bad, p) for p in (top, f"{top}.py", f"src/{top}", f"src/{top}.py")):
        raise UsageError(f"{where} {spec!r} names a module that is not part of the repository {root} at "
                         f"{bad[:10]}; pass --pipeline to say which pipeline to run at each commit")
    return spec


def first_position(comparison: Comparison, golden_order: Mapping[str, int]) -> float | None:
    """Where the first divergence sits in the golden's stage order (a stage only the new run has
    sits just after the golden stage before it); None when the runs are identical."""
    last = -1.0
    for diff in comparison.stages:
        pos = float(golden_order[diff.stage]) if diff.stage in golden_order else last + 0.5
        if diff.stage in golden_order:
            last = pos
        if not diff.equal:
            return pos
    return None


@dataclass
class _State:
    """What the probes have learnt so far: the symptom once the bad end has run, and every probe."""

    index: dict[str, int]
    subjects: dict[str, str]
    probes: list[BisectProbe] = field(default_factory=list)
    symptom: str | None = None
    symptom_pos: float | None = None


def bisect_commits(golden: Golden, repo: str | Path, good: str, bad: str, spec: str, *, seed: int,
                   tolerance: Tolerance | None = None, per_stage: Mapping[str, Tolerance] | None = None,
                   cache: Path | None = None, timeout: float = 600.0, spec_from_manifest: bool = False,
                   progress: Progress | None = None) -> BisectOutcome:
    """Find the first commit of GOOD..BAD whose golden run diverges at (or before) the bad end's stage.

    `cache` None disables the cache. Usage problems (not a repository, an unknown revision, a BAD
    that does not descend from GOOD, a golden spec outside the repository) raise `UsageError`
    before anything runs.
    """
    tolerance = tolerance or Tolerance()
    root = _git.repo_root(repo)
    good_sha, bad_sha = _git.resolve(root, good, "--good"), _git.resolve(root, bad, "--bad")
    items = _git.commit_range(root, good_sha, bad_sha)
    run_spec = worker_spec(spec, root, bad_sha, from_manifest=spec_from_manifest)
    runner = CommitRunner(root, run_spec, seed, cache=cache, timeout=timeout)
    order = {rec.name: i for i, rec in enumerate(golden.trace)}
    state = _State(index={sha: i for i, sha in enumerate(items)}, subjects={})
    say = progress or (lambda _msg: None)

    def probe(sha: str) -> Verdict:
        i = state.index[sha]
        role = "good end" if i == 0 else "bad end" if i == len(items) - 1 else ""
        subject = state.subjects.setdefault(sha, _git.commit_info(root, sha).subject)
        say(f"golden run {len(state.probes) + 1} at commit {i + 1}/{len(items)} {sha[:10]} "
            f"({role or 'between'}): {subject[:60]}")
        result = runner.run(sha)
        p = BisectProbe(item=sha[:10], verdict="skip", index=i, role=role, cached=result.cached,
                        seconds=result.seconds, extra={"commit": sha, "subject": subject})
        state.probes.append(p)
        if result.trace is None:
            p.reason = result.reason
            return "skip"
        try:
            comparison = compare_traces(golden.trace, result.trace, tolerance, per_stage)
        except SignalchainError as exc:
            p.reason = f"its trace cannot be compared with the golden: {exc}"
            return "skip"
        first, pos = comparison.first_divergence, first_position(comparison, order)
        if first is not None:
            p.first_divergence, p.detail = first.stage, first.to_dict()
        p.verdict, p.reason = _judge(role, first.stage if first else None, pos, state)
        if role == "bad end" and pos is not None:
            state.symptom, state.symptom_pos = p.first_divergence, pos
        return p.verdict

    result = bisect_range(items, probe)
    outcome = BisectOutcome(
        mode="commits", status=result.status, good=good_sha[:10], bad=bad_sha[:10], n_items=len(items),
        probes=state.probes, symptom=state.symptom, runs=runner.runs, cached=runner.hits,
        extra={"repo": str(root), "good_commit": good_sha, "bad_commit": bad_sha, "pipeline": run_spec,
               "seed": seed, "cache": str(cache) if cache else None},
    )
    if result.last_good is not None:
        outcome.last_good = items[result.last_good][:10]
    outcome.candidates = [sha[:10] for sha in result.candidates]
    if result.culprit is not None:
        outcome.first_bad = _culprit(root, result.culprit, state)
    return outcome


def _judge(role: str, stage: str | None, pos: float | None, state: _State) -> tuple[Verdict, str]:
    """The verdict of one probe that ran, and the words saying why."""
    if role == "good end":
        return ("good", "identical to the golden") if stage is None else ("bad", f"diverges at {stage!r}")
    if role == "bad end":
        return ("bad", f"diverges at {stage!r} (the symptom)") if stage is not None else (
            "good", "identical to the golden")
    if stage is None or pos is None:
        return "good", "identical to the golden"
    if state.symptom_pos is not None and pos <= state.symptom_pos:
        at = "the symptom" if stage == state.symptom else f"before the symptom {state.symptom!r}"
        return "bad", f"diverges at {stage!r} ({at})"
    return "good", f"later divergence at {stage!r} (after the symptom {state.symptom!r}): judged good"


def _culprit(root: Path, sha: str, state: _State) -> dict[str, Any]:
    p = next(p for p in state.probes if p.extra.get("commit") == sha)
    return {
        "item": sha[:10], "sha": sha, "short": sha[:10], "subject": state.subjects.get(sha, ""),
        "diffstat": _git.diffstat(root, sha), "stage": p.first_divergence,
        "kind": p.detail.get("kind"), "detail": p.detail.get("detail", {}), "index": p.index,
    }
