"""verify's other states: commits of a real repository (run in worktrees) and saved checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from checkpoint_run import TwoGroupPipeline, train
from signalchain.cli import cli

_PIPE = '''"""A user's tiny classifier step."""

import torch
import torch.nn.functional as F


class Pipe:
    name = "nanpipe"

    def golden_batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        return {{"x": torch.randn(8, 6, generator=g), "y": torch.randint(0, 3, (8,), generator=g)}}

    def build_model(self, seed):
        torch.manual_seed(seed)
        return torch.nn.Linear(6, 3)

    def build_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model, batch, tap):
        logits = tap("logits", model(tap("features", batch["x"])))  # [B, 3]
        ce = F.cross_entropy(logits, batch["y"])
        terms = tap("loss.terms", torch.stack([ce, {extra}]))  # [2]: the task term and a regulariser
        loss = tap("loss", {total})
        return {{"loss": loss, "logits": logits, "targets": batch["y"]}}
'''
BUG = "0.1 * logits.abs().mean() * torch.log(torch.zeros(()))"  # a regulariser of log(0): NaN
COMMITS = [("nan regulariser", BUG, "terms.sum()"),
           ("fix: a finite regulariser", "0.1 * logits.abs().mean()", "terms.sum()"),
           ("'fix': nan_to_num the loss", BUG, "torch.nan_to_num(terms.sum())")]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("verify-repo")
    _git(root, "init", "-q", "-b", "main")
    shas = []
    for subject, extra, total in COMMITS:
        (root / "userpipe.py").write_text(_PIPE.format(extra=extra, total=total))
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", subject)
        shas.append(_git(root, "rev-parse", "HEAD").strip())
    (root / "userpipe.py").write_text("raise SystemExit('the work tree is never run')\n")  # a dirty work tree
    return root, shas


def _verify(*args: str) -> tuple[int, dict, str]:
    out = Path(args[args.index("--json") + 1])
    res = CliRunner().invoke(cli, ["verify", *args])
    return res.exit_code, json.loads(out.read_text()) if out.exists() else {}, res.output


# Over 60 s on the shared 2-core box (63 s): two `verify` runs between git revisions, each checking out
# and importing the user's pipeline before and after over two seeds: the command end to end.
@pytest.mark.slow
def test_a_commit_that_fixes_the_nan_is_fixed_and_one_that_masks_it_persists(repo, tmp_path):
    root, (bug, fix, mask) = repo
    common = ["--repo", str(root), "--before", "userpipe.py:Pipe", "--family", "numerics", "--control", "none",
              "--seeds", "2"]
    code, report, text = _verify(*common, "--before-rev", bug[:10], "--after-rev", fix[:10],
                                 "--json", str(tmp_path / "fixed.json"))
    assert code == 0, text
    assert report["verify"]["verdict"] == "fixed"
    assert {f["id"] for f in report["findings"]} == {"verify.fixed"}
    assert "nan regulariser" in report["verify"]["before"]["state"]
    code, report, text = _verify(*common, "--before-rev", bug[:10], "--after-rev", mask[:10],
                                 "--json", str(tmp_path / "masked.json"))
    assert code == 1, text
    assert report["verify"]["verdict"] == "failure_persists"
    (f,) = [f for f in report["findings"] if f["id"] == "verify.failure_persists"]
    assert f["stage"].startswith("loss")
    assert (root / "userpipe.py").read_text().startswith("raise SystemExit")  # the work tree was not touched
    assert _git(root, "worktree", "list").count("\n") == 1


def test_commit_states_refuse_faults_and_need_a_spec(repo, tmp_path):
    root, (bug, fix, _) = repo
    res = CliRunner().invoke(cli, ["verify", "--repo", str(root), "--before-rev", bug, "--after-rev", fix,
                                   "--family", "numerics"])
    assert res.exit_code == 2 and "needs the pipeline to run at that commit" in res.output
    res = CliRunner().invoke(cli, ["verify", "--repo", str(root), "--before-rev", bug, "--before", "userpipe.py:Pipe",
                                   "--before-fault", "lr_too_small", "--family", "numerics"])
    assert res.exit_code == 2 and "runs the commit's own code" in res.output
    res = CliRunner().invoke(cli, ["verify", "--repo", str(root), "--before-rev", "nope", "--before",
                                   "userpipe.py:Pipe", "--family", "numerics"])
    assert res.exit_code == 2 and "'nope' is not a commit" in res.output


@pytest.mark.slow
def test_a_checkpoint_with_nan_in_adams_state_and_its_clean_predecessor(tmp_path):
    paths = train(tmp_path / "run", steps=4, spike_at=None)
    poisoned = tmp_path / "poisoned.pt"
    ckpt = torch.load(paths[-1], weights_only=True)
    head_bias = ckpt["optimizer"]["param_groups"][1]["params"][-1]
    ckpt["optimizer"]["state"][head_bias]["exp_avg_sq"][0] = float("nan")  # a resumed run brings NaN with it
    torch.save(ckpt, poisoned)
    spec = str(Path(__file__).parents[1] / "checkpoint_run.py") + ":TwoGroupPipeline"
    code, report, text = _verify("--before", spec, "--before-checkpoint", str(poisoned),
                                 "--after-checkpoint", str(paths[-1]), "--family", "numerics", "--control", "none",
                                 "--seeds", "2", "--json", str(tmp_path / "ckpt.json"))
    assert code == 0, text
    before = report["verify"]["before"]["runs"][0]["errors"]
    assert any(e["id"] == "nonfinite.optimizer_state" for e in before), before
    assert report["verify"]["verdict"] == "fixed"
    res = CliRunner().invoke(cli, ["verify", "--before", spec, "--before-checkpoint", str(tmp_path / "none.pt"),
                                   "--family", "numerics"])
    assert res.exit_code == 2 and "no such file or folder" in res.output
    assert TwoGroupPipeline().name == "two-groups"
