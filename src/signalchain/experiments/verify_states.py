"""The other forms of a verification's state: a commit of a repository, and a saved checkpoint.

`CommitState` is the pipeline SPEC as commit REV has it: each evaluation checks the commit out in a
temporary `git worktree` (the user's work tree is never touched) and runs the doctor's families in
a worker process whose path starts with that worktree (`_verify_worker.py`), so that the failing
and the fixed code, which share module names, never meet in one interpreter. The worker writes
the findings and figures as JSON; everything `verify` reads is in them.

`CheckpointPipeline` is a pipeline whose models start from a saved checkpoint (its weights, and
its optimizer state when it holds one), loaded the way `bisect --checkpoints` loads them: safely,
`torch.load(weights_only=True)`, safetensors, HF folders, or the pipeline's own `load_checkpoint`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import PipelineError, UsageError
from ..findings import Finding
from . import _verify_worker
from .bisect._checkpoint_files import CheckpointFile, CheckpointLoadError
from .bisect._git import commit_info, repo_root, resolve, worktree_at
from .bisect._probe import load_into
from .bisect._runner import kill_group, worker_env

__all__ = ["CommitState", "CheckpointPipeline", "checkpoint_file"]

_WORKER = Path(_verify_worker.__file__).resolve()


class CommitState:
    """`spec` at commit `rev` of the repository `repo`; evaluated in a worker process per call."""

    def __init__(self, repo: str | Path, rev: str, spec: str, option: str, budget: str = "economy",
                 timeout: float = 3600.0):
        self.root = repo_root(repo)
        self.sha = resolve(self.root, rev, option)
        info = commit_info(self.root, self.sha)
        self.spec, self.budget, self.timeout = spec, budget, timeout
        self.name = f"{spec} at {info.short} ({info.subject[:60]})"

    def evaluate(self, seed: int, families: Sequence[str], golden: bool = True) -> tuple[list[Finding], dict[str, Any]]:
        with worktree_at(self.root, self.sha) as tree, tempfile.TemporaryDirectory(prefix="signalchain-verify-") as tmp:
            out = Path(tmp) / "side.json"
            cmd = [sys.executable, str(_WORKER), "--spec", self.spec, "--seed", str(seed),
                   "--families", ",".join(families), "--budget", self.budget, "--out", str(out)]
            proc = subprocess.Popen(cmd + (["--golden"] if golden else []), cwd=tree, env=worker_env(tree),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, errors="replace", start_new_session=True)
            try:
                _, stderr = proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise PipelineError(f"{self.name}: the doctor ran past {self.timeout:g} s and was stopped") from None
            except BaseException:  # Ctrl-C: the worker must not outlive signalchain
                kill_group(proc)
                raise
            if proc.returncode != 0:
                lines = [ln for ln in stderr.splitlines() if ln.strip()]
                mine = [ln[len(_verify_worker.PREFIX):] for ln in lines if ln.startswith(_verify_worker.PREFIX)]
                why = mine[-1] if mine else (lines[-1][:300] if lines else f"exit status {proc.returncode}")
                raise PipelineError(f"{self.name}: {why}")
            data = json.loads(out.read_text(encoding="utf-8"))
        return [Finding.from_dict(f) for f in data["findings"]], dict(data["metrics"])


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:  # unreadable: the load below names the problem
        return [folder]


def checkpoint_file(path: str | Path, option: str, pipeline: Any = None) -> CheckpointFile:
    """One checkpoint named on the command line: a file (.pt/.pth/.bin/.ckpt/.safetensors) or an HF folder.

    With `pipeline`, it is loaded into the pipeline's model once now: a file that is not a checkpoint
    (for this pipeline) is a usage error before anything runs, never a failing state whose crash a
    fix would seem to remove."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{option} {str(path)!r}: no such file or folder")
    if p.is_dir() and not _listing(p):
        raise UsageError(f"{option} {str(path)!r}: an empty folder, not a checkpoint; give a checkpoint file "
                         "(.pt/.pth/.bin/.ckpt/.safetensors) or a save_pretrained folder")
    kind = "hf-dir" if p.is_dir() else ("safetensors" if p.suffix.lower() == ".safetensors" else "torch")
    ckpt = CheckpointFile(p, kind, None)
    if pipeline is not None:
        try:
            load_into(pipeline, ckpt, 0)
        except CheckpointLoadError as exc:
            raise UsageError(f"{option} {str(path)!r}: not a checkpoint {getattr(pipeline, 'name', 'the pipeline')} "
                             f"can start from ({exc})") from None
    return ckpt


class CheckpointPipeline:
    """`inner` with every model built from the checkpoint, and its optimizer holding the saved state."""

    def __init__(self, inner: Any, ckpt: CheckpointFile):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_ckpt", ckpt)
        object.__setattr__(self, "_optimizers", {})
        object.__setattr__(self, "name", f"{getattr(inner, 'name', 'pipeline')}@{ckpt.path.name}")

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_inner"), name)

    def build_model(self, seed: int) -> Any:
        try:
            loaded = load_into(self._inner, self._ckpt, seed)
        except CheckpointLoadError as exc:
            raise PipelineError(str(exc)) from None
        self._optimizers.clear()  # the newest model only: a family builds one model at a time
        self._optimizers[id(loaded.model)] = loaded.optimizer
        return loaded.model

    def build_optimizer(self, model: Any) -> Any:
        opt = self._optimizers.pop(id(model), None)
        return opt if opt is not None else self._inner.build_optimizer(model)
