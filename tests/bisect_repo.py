"""A real git repository of a user's tiny pipeline, one commit at a time, for the bisect tests and benchmark.

Commit k (1-based) of `build_repo(path, n, bug_at=…)` changes something harmless (a comment in
`userpipe.py`, the README, an unused constant in `constants.py`); from `bug_at` on the crop starts
`shift` samples late (the bug: every stage from `crop` on diverges); `broken_at` holds a syntax
error that the next commit fixes; from `benign_at` on the loss is scaled by 1.001 (a later, benign
divergence at `loss` only).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SPEC = "userpipe.py:UserPipe"

_PIPE = '''"""A user's tiny training step (commit {k})."""

import torch

CROP_SHIFT = {shift}  # samples the crop start moves
LOSS_SCALE = {scale}
# note {k}


class UserPipe:
    name = "userpipe"
    sample_rate = 8000

    def golden_batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        return {{"audio": torch.randn(2, 1, 800, generator=g) * 0.1}}  # [B, C, T]

    def build_model(self, seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))

    def build_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model, batch, tap):
        audio = tap("audio.original", batch["audio"], sample_rate=self.sample_rate)
        b = audio.shape[0]
        start = torch.tensor([100, 200]) + CROP_SHIFT
        crop = tap("crop", torch.stack([start, start + 320], dim=1))  # [B, 2] sample bounds
        cropped = torch.stack([audio[i, :, int(crop[i, 0]):int(crop[i, 1])] for i in range(b)])
        cropped = tap("audio.cropped", cropped, sample_rate=self.sample_rate)  # [B, 1, 320]
        frames = cropped.reshape(b, 20, 16)  # [B, T, 16]
        tokens = tap("tokens", ((frames.abs().sum(-1) * 10).long() % 4).unsqueeze(1), cardinality=4)  # [B, 1, T]
        logits = tap("logits", model(frames))  # [B, T, 4]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 4), tokens.reshape(-1)) * LOSS_SCALE
        tap("loss", loss)
        return {{"loss": loss}}
'''


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def build_repo(path: Path, n: int = 16, *, bug_at: int = 11, shift: int = 7, broken_at: int | None = None,
               benign_at: int | None = None) -> list[str]:
    """Make `path` a repository of `n` commits; returns their shas, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "commit.gpgsign", "false")
    shas = []
    for k in range(1, n + 1):
        text = _PIPE.format(k=k if k % 3 == 1 else 1, shift=shift if k >= bug_at else 0,
                            scale="1.001" if benign_at is not None and k >= benign_at else "1.0")
        if k == broken_at:
            text = text.replace("class UserPipe:", "class UserPipe(:")
        (path / "userpipe.py").write_text(text)
        (path / "README.md").write_text(f"# user project\n\nrevision {k if k % 3 == 0 else 0}\n")
        (path / "constants.py").write_text(f"UNUSED = {k if k % 3 == 2 else 0}\n")
        _git(path, "add", "-A")
        what = ("crop: start the window later" if k == bug_at else "wip: refactor the model" if k == broken_at
                else "loss: scale by 1.001" if k == benign_at else f"chore {k}: tidy")
        _git(path, "commit", "-q", "--allow-empty", "-m", what)
        shas.append(_git(path, "rev-parse", "HEAD").strip())
    return shas


def capture_golden(repo: Path, sha: str, out: Path, seed: int = 0, spec: str = SPEC) -> Path:
    """The golden batch of commit `sha`, recorded through the bisect worker in a worktree."""
    from signalchain.experiments.bisect._runner import CommitRunner
    from signalchain.golden import collect_provenance, save_golden

    res = CommitRunner(repo, spec, seed, cache=None, timeout=300).run(sha)
    assert res.trace is not None, res.reason
    prov = collect_provenance(None, spec=spec, seed=seed)
    return save_golden(out, res.trace, prov, write_wavs=False)


def tree_state(repo: Path) -> tuple[str, str, str]:
    """HEAD, `git status --porcelain` (untracked files too) and the worktree list: all must stay put."""
    return (_git(repo, "rev-parse", "HEAD"), _git(repo, "status", "--porcelain", "--untracked-files=all"),
            _git(repo, "worktree", "list", "--porcelain"))


PKG_SPEC = "userpkg.pipe:UserPipe"


def build_pkg_repo(path: Path) -> list[str]:
    """A src-layout package (`src/userpkg/pipe.py`, named as a module): commit 1 is clean, commit 2's
    step raises, commit 3 has the crop bug. Returns the three shas."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "commit.gpgsign", "false")
    pkg = path / "src" / "userpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shas = []
    for k, (shift, what) in enumerate([(0, "package: first version"), (0, "step: assert a shape (raises)"),
                                       (5, "crop: move the window")], start=1):
        text = _PIPE.format(k=k, shift=shift, scale="1.0")
        if k == 2:
            text = text.replace('        b = audio.shape[0]\n',
                                '        b = audio.shape[0]\n        raise RuntimeError("shape check failed")\n')
        (pkg / "pipe.py").write_text(text)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", what)
        shas.append(_git(path, "rev-parse", "HEAD").strip())
    return shas
