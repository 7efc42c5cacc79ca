"""`signalchain bisect` over commits: the verdict, its JSON and exit codes, the cache, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisect_repo import SPEC, build_repo, capture_golden, tree_state
from signalchain.cli import cli


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    base = tmp_path_factory.mktemp("bisect-cli")
    repo = base / "repo"
    shas = build_repo(repo, 6, bug_at=4)
    golden = capture_golden(repo, shas[0], base / "golden")
    return {"repo": repo, "shas": shas, "golden": golden, "base": base}


def _bisect(*args: str):
    return CliRunner().invoke(cli, ["bisect", *args])


@pytest.mark.slow
def test_names_the_commit_exits_1_and_writes_the_json(bed, tmp_path, monkeypatch):
    """The pipeline comes from the project configuration ([tool.signalchain]), as for every command."""
    repo, shas, out = bed["repo"], bed["shas"], tmp_path / "b.json"
    (tmp_path / "pyproject.toml").write_text(f'[tool.signalchain]\npipeline = "{repo}/userpipe.py:UserPipe"\n')
    monkeypatch.chdir(tmp_path)
    before = tree_state(repo)
    res = _bisect(str(bed["golden"]), "--good", shas[0], "--bad", shas[-1], "--repo", str(repo), "--json", str(out),
                  "--html", str(tmp_path / "b.html"))
    assert res.exit_code == 1, res.output
    assert "The first bad commit is " + shas[3][:10] in res.output and "userpipe.py" in res.output
    assert "(from pyproject.toml [tool.signalchain])" in res.output
    doc = json.loads(out.read_text())
    assert doc["pipeline"]["source"] == "pyproject.toml [tool.signalchain]"
    b = doc["bisect"]
    assert b["mode"] == "commits" and b["status"] == "found" and b["first_bad"]["sha"] == shas[3]
    assert b["first_bad"]["stage"] == "crop" and b["runs"] == len(b["probes"]) and b["cached"] == 0
    assert {"commit", "subject", "verdict", "first_divergence", "reason"} <= set(b["probes"][0])
    assert b["skipped"] == []
    (f,) = [f for f in doc["findings"] if f["id"] == "bisect.first_bad_commit"]
    assert f["severity"] == "error" and f["stage"] == "crop"
    assert f["evidence"]["subject"] == "crop: start the window later"
    assert "first bad commit" in (tmp_path / "b.html").read_text()
    # The default cache lives in the repository's git folder; the second run makes no golden run.
    assert (repo / ".git" / "signalchain-bisect").is_dir()
    res = _bisect(str(bed["golden"]), "--good", shas[0], "--bad", shas[-1], "--repo", str(repo), "--json", str(out))
    assert res.exit_code == 1, res.output
    b = json.loads(out.read_text())["bisect"]
    assert b["runs"] == 0 and b["cached"] == len(b["probes"]) >= 2
    assert tree_state(repo) == before


@pytest.mark.slow
def test_pipeline_option_names_the_spec_to_run(bed, tmp_path):
    """--pipeline over the golden's spec (same spec here, so the earlier bisect's cache answers)."""
    repo, shas, out = bed["repo"], bed["shas"], tmp_path / "p.json"
    res = _bisect(str(bed["golden"]), "--good", shas[0], "--bad", shas[-1], "--repo", str(repo), "--json", str(out),
                  "--pipeline", "userpipe.py:UserPipe", "--tol", "logits=1e-3")
    assert res.exit_code == 1, res.output
    assert "(from --pipeline)" in res.output
    b = json.loads(out.read_text())["bisect"]
    assert b["pipeline"] == "userpipe.py:UserPipe" and b["first_bad"]["sha"] == shas[3]


@pytest.mark.slow
def test_a_flaky_bad_end_exits_0_with_a_warning(bed, tmp_path):
    repo, shas, out = bed["repo"], bed["shas"], tmp_path / "f.json"
    res = _bisect(str(bed["golden"]), "--good", shas[0], "--bad", shas[2], "--repo", str(repo), "--json", str(out),
                  "--no-cache", "--pipeline", "userpipe.py:UserPipe")
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["bisect"]["status"] == "flaky_bad" and len(doc["bisect"]["probes"]) == 2
    assert [f["id"] for f in doc["findings"]] == ["bisect.flaky"]


def _one_line_exit_2(res, match: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and match in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_usage_errors_exit_2_with_one_line(bed, tmp_path):
    g, repo, shas = str(bed["golden"]), str(bed["repo"]), bed["shas"]
    _one_line_exit_2(_bisect(g, "--bad", shas[-1], "--repo", repo), "needs --good")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", str(tmp_path)),
                     "not inside a git work tree")
    _one_line_exit_2(_bisect(g, "--good", "nope", "--bad", shas[-1], "--repo", repo, "--pipeline", SPEC),
                     "'nope' is not a commit")
    _one_line_exit_2(_bisect(str(tmp_path / "missing"), "--good", shas[0], "--bad", shas[-1], "--repo", repo),
                     "missing")
    _one_line_exit_2(_bisect(g, "--checkpoints", "ckpt/*", "--good", shas[0]), "--good")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo, "--no-cache", "--cache", "x"),
                     "not both")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo, "--tol", "nostage=1e-3"),
                     "no stage 'nostage'")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo, "--timeout", "0"), "--timeout")
    _one_line_exit_2(_bisect(g, "--good", shas[-1], "--bad", shas[0], "--repo", repo, "--pipeline", SPEC),
                     "not an ancestor")


def test_the_golden_never_names_the_code_to_run(bed, tmp_path, monkeypatch):
    """Without --pipeline or a project configuration, bisect asks for one (both ways named); it never runs
    the path a golden names, inside the repository or not; --hf-musicgen goes with --checkpoints."""
    monkeypatch.chdir(tmp_path)
    g, repo, shas = str(bed["golden"]), str(bed["repo"]), bed["shas"]
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo),
                     "never the golden's: pass --pipeline SPEC")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo), "[tool.signalchain]")
    _one_line_exit_2(_bisect(g, "--good", shas[0], "--bad", shas[-1], "--repo", repo, "--hf-musicgen", str(tmp_path),
                             "--data", str(tmp_path)), "--checkpoints DIR_OR_GLOB")


def test_a_golden_spec_outside_the_repository_is_refused(bed, tmp_path, monkeypatch):
    """A golden is data: a pipeline path it names outside the repository is not run; --pipeline is asked for."""
    monkeypatch.chdir(tmp_path)
    from signalchain.golden import load_golden, save_golden

    g = load_golden(bed["golden"])
    forged = save_golden(tmp_path / "forged", g.trace, {**g.provenance, "pipeline_spec": "/tmp/evil.py:x"},
                         write_wavs=False)
    shas = bed["shas"]
    _one_line_exit_2(_bisect(str(forged), "--good", shas[0], "--bad", shas[-1], "--repo", str(bed["repo"])),
                     "pass --pipeline")
    assert Path(tmp_path / "forged").is_dir()
