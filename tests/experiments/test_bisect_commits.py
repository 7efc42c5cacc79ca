"""Bisect over real git commits of a user-style pipeline: the crop commit, skips, flaky ends, cache.

One 16-commit repository (built once for the module): commit 11 moves the crop start by 7 samples,
commit 6 does not import (fixed at 7), from commit 8 on the loss is scaled by 1.001 (a later,
benign divergence). The golden is captured at commit 1 through the bisect worker.
"""

from __future__ import annotations

import math

import pytest

from bisect_repo import PKG_SPEC, SPEC, build_pkg_repo, build_repo, capture_golden, tree_state
from signalchain.checks.bisect import judge_bisect
from signalchain.errors import UsageError
from signalchain.experiments.bisect._runner import CommitRunner, cache_key
from signalchain.experiments.bisect.commits import bisect_commits, worker_spec
from signalchain.golden import load_golden

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    base = tmp_path_factory.mktemp("bisect")
    repo = base / "repo"
    shas = build_repo(repo, 16, bug_at=11, broken_at=6, benign_at=8)
    golden = load_golden(capture_golden(repo, shas[0], base / "golden"))
    # The user's work tree is dirty: changed tracked files and an untracked one; none may move. Its copy
    # of the pipeline does not even import: every probe must run the commit's own code.
    (repo / "README.md").write_text("local edits in progress\n")
    (repo / "userpipe.py").write_text("this is not python (\n")
    (repo / "scratch.txt").write_text("untracked notes\n")
    before = tree_state(repo)
    cache = base / "cache"
    first = bisect_commits(golden, repo, shas[0], shas[-1], SPEC, seed=0, cache=cache)
    return {"repo": repo, "shas": shas, "golden": golden, "cache": cache, "before": before, "first": first,
            "base": base}


def test_names_the_crop_commit_within_the_budget(bed):
    o, shas = bed["first"], bed["shas"]
    assert o.status == "found" and o.n_items == 16
    assert o.first_bad["sha"] == shas[10] and o.first_bad["stage"] == "crop" == o.symptom
    assert o.first_bad["subject"] == "crop: start the window later"
    assert "userpipe.py" in o.first_bad["diffstat"] and "constants.py" in o.first_bad["diffstat"]
    assert o.runs + o.cached == len(o.probes) <= math.ceil(math.log2(16)) + 2
    assert o.runs == len(o.probes) and o.cached == 0  # a fresh cache: every probe was a real run
    assert [p.role for p in o.probes[:2]] == ["good end", "bad end"]
    assert o.last_good == shas[9][:10]
    # The first bad commit's numbers: the crop's first bound moved from 100 to 107.
    assert o.first_bad["detail"]["golden_value"] == 100 and o.first_bad["detail"]["new_value"] == 107
    (f, *rest) = judge_bisect(o)
    assert f.id == "bisect.first_bad_commit" and f.severity.value == "error" and f.stage == "crop"
    assert shas[10][:10] in f.message and "crop: start the window later" in f.message and "107" in f.message
    assert f.evidence["sha"] == shas[10] and f.evidence["runs"] == o.runs and f.evidence["cached"] == 0
    assert not rest


def test_a_later_benign_divergence_is_noted_and_judged_good(bed):
    benign = [p for p in bed["first"].probes if p.first_divergence == "loss"]
    assert benign, "the search should have probed a commit between 8 and 10"
    assert all(p.verdict == "good" and "later divergence" in p.reason for p in benign)


def test_the_users_work_tree_is_untouched(bed):
    repo = bed["repo"]
    assert tree_state(repo) == bed["before"]  # HEAD, status (dirty and untracked files), worktree list
    assert (repo / "README.md").read_text() == "local edits in progress\n"
    assert (repo / "scratch.txt").read_text() == "untracked notes\n"
    assert (repo / "userpipe.py").read_text() == "this is not python (\n"


def test_a_second_bisect_is_answered_from_the_cache(bed):
    shas = bed["shas"]
    again = bisect_commits(bed["golden"], bed["repo"], shas[0], shas[-1], SPEC, seed=0, cache=bed["cache"])
    assert again.first_bad["sha"] == shas[10]
    assert again.runs == 0 and again.cached == len(again.probes)
    assert all(p.cached for p in again.probes)
    # An overlapping range: the ends are known already; only what is new runs.
    overlap = bisect_commits(bed["golden"], bed["repo"], shas[0], shas[11], SPEC, seed=0, cache=bed["cache"])
    assert overlap.first_bad["sha"] == shas[10] and overlap.cached >= 2
    assert overlap.runs + overlap.cached == len(overlap.probes)


def test_a_commit_that_cannot_import_is_skipped_and_said(bed):
    shas = bed["shas"]
    o = bisect_commits(bed["golden"], bed["repo"], shas[0], shas[10], SPEC, seed=0, cache=bed["cache"])
    assert o.status == "found" and o.first_bad["sha"] == shas[10]
    (skip,) = o.skipped
    assert skip.extra["commit"] == shas[5] and "SyntaxError" in skip.reason
    said = [f for f in judge_bisect(o) if f.id == "bisect.skipped"]
    assert len(said) == 1 and said[0].severity.value == "info"
    assert shas[5][:10] in said[0].message and "SyntaxError" in said[0].message
    assert o.runs + o.cached <= math.ceil(math.log2(11)) + 2 + len(o.skipped)  # a skip costs its neighbour


def test_a_bad_end_that_matches_the_golden_is_flaky_and_not_bisected(bed):
    shas = bed["shas"]
    o = bisect_commits(bed["golden"], bed["repo"], shas[0], shas[4], SPEC, seed=0, cache=bed["cache"])
    assert o.status == "flaky_bad" and len(o.probes) == 2 and o.first_bad is None
    (f,) = judge_bisect(o)
    assert f.id == "bisect.flaky" and f.severity.value == "warning"
    assert f.evidence["end"] == "bad" and "does not reproduce" in f.message


def test_a_good_end_that_does_not_reproduce_the_golden_is_flaky(bed):
    shas = bed["shas"]  # commit 8 scales the loss: it does not reproduce the golden of commit 1
    o = bisect_commits(bed["golden"], bed["repo"], shas[7], shas[-1], SPEC, seed=0, cache=bed["cache"])
    assert o.status == "flaky_good" and len(o.probes) == 2 and o.runs == 0  # both ends were cached
    (f,) = judge_bisect(o)
    assert f.id == "bisect.flaky" and f.evidence["end"] == "good" and f.stage == "loss"
    assert "does not reproduce the golden" in f.message and "1.41" in f.message  # the golden loss


def test_an_end_that_cannot_run_is_said(bed):
    shas = bed["shas"]
    o = bisect_commits(bed["golden"], bed["repo"], shas[5], shas[8], SPEC, seed=0, cache=bed["cache"])
    assert o.status == "unrunnable_end"
    (f,) = judge_bisect(o)
    assert f.id == "bisect.unrunnable_end" and "good end" in f.message and "SyntaxError" in f.message


def test_a_timeout_is_a_skip_and_is_not_cached(bed, tmp_path):
    shas = bed["shas"]
    o = bisect_commits(bed["golden"], bed["repo"], shas[0], shas[2], SPEC, seed=0, cache=tmp_path / "c",
                       timeout=0.05)
    assert o.status == "unrunnable_end"
    assert all("--timeout" in p.reason for p in o.probes)
    assert not [p for p in (tmp_path / "c").iterdir() if not p.name.startswith(".")]


def test_usage_errors_come_before_any_run(bed, tmp_path):
    g, repo, shas = bed["golden"], bed["repo"], bed["shas"]
    with pytest.raises(UsageError, match="not a commit"):
        bisect_commits(g, repo, "no-such-rev", shas[-1], SPEC, seed=0, cache=None)
    with pytest.raises(UsageError, match="not an ancestor"):
        bisect_commits(g, repo, shas[-1], shas[0], SPEC, seed=0, cache=None)
    with pytest.raises(UsageError, match="not inside a git work tree"):
        bisect_commits(g, tmp_path, shas[0], shas[-1], SPEC, seed=0, cache=None)


def test_a_spec_read_from_the_golden_must_be_the_repositorys(bed):
    repo, bad = bed["repo"].resolve(), bed["shas"][-1]
    assert worker_spec(f"{repo}/userpipe.py:UserPipe", repo, bad, from_manifest=True) == SPEC
    for spec, why in (("/etc/evil.py:x", "outside the repository"), ("../evil.py:x", "leaves the repository"),
                      ("os:system", "not part of the repository")):
        with pytest.raises(UsageError, match=why):
            worker_spec(spec, repo, bad, from_manifest=True)
    assert worker_spec("/elsewhere/pipe.py:P", repo, bad, from_manifest=False) == "/elsewhere/pipe.py:P"


def test_a_damaged_cache_entry_is_dropped_and_run_again(bed, tmp_path):
    sha = bed["shas"][0]
    entry = tmp_path / cache_key(sha, SPEC, 0)
    entry.mkdir()
    (entry / "result.json").write_text("{not json")
    runner = CommitRunner(bed["repo"], SPEC, 0, cache=tmp_path, timeout=300)
    assert runner._lookup(sha) is None and not entry.exists()


def test_a_package_module_spec_runs_the_commits_src_and_a_failing_step_is_skipped(tmp_path):
    """src/ layout named as a module: commit 2's step raises (skipped), commit 3 has the bug; with every
    commit between the ends skipped, the answer is the interval."""
    repo = tmp_path / "pkg"
    shas = build_pkg_repo(repo)
    golden = load_golden(capture_golden(repo, shas[0], tmp_path / "golden", spec=PKG_SPEC))
    o = bisect_commits(golden, repo, shas[0], shas[2], PKG_SPEC, seed=0, cache=None, spec_from_manifest=True)
    assert o.status == "ambiguous" and o.symptom == "crop"
    assert o.candidates == [shas[1][:10], shas[2][:10]]
    (skip,) = o.skipped
    assert "the golden step failed: RuntimeError: shape check failed" in skip.reason and "pipe.py" in skip.reason
    (f, said) = judge_bisect(o)
    assert f.id == "bisect.ambiguous" and f.severity.value == "warning" and shas[1][:10] in f.message
    assert said.id == "bisect.skipped"
