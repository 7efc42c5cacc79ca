"""One golden run at one commit: a temporary worktree, a worker process, and a per-commit cache.

The run happens in a subprocess (`_worker.py`, started by path) whose current folder is the
commit's worktree and whose `PYTHONPATH` starts with that worktree (and its `src/`), then the
folder the running signalchain lives in: the pipeline is the commit's code, signalchain is ours
(unless the repository is signalchain itself, whose own copy then comes first).

Results are cached per (commit sha, pipeline spec, seed, signalchain version): a success as the
golden folder the worker saved, a failure to import or run as its reason. A timeout is not cached
(a slower machine, or a longer `--timeout`, may finish it). Each entry is built in a temporary
folder beside it and renamed into place, so a reader never sees half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..._atomic import write_text_atomic
from ..._version import __version__
from ...errors import SignalchainError
from ...golden import load_golden
from ...trace import Trace
from . import _worker
from ._git import worktree_at

__all__ = ["RunResult", "CommitRunner", "cache_key", "worker_env", "kill_group"]

_WORKER = Path(_worker.__file__).resolve()
_SIGNALCHAIN_HOME = Path(__file__).resolve().parents[3]  # the folder holding the `signalchain` package


@dataclass
class RunResult:
    trace: Trace | None  # None when the commit could not import or run
    reason: str = ""  # why not: the worker's one line, or the timeout
    cached: bool = False
    seconds: float = 0.0


def cache_key(sha: str, spec: str, seed: int) -> str:
    text = json.dumps({"commit": sha, "spec": spec, "seed": seed, "signalchain": __version__}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _reason(stderr: str, returncode: int) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    mine = [ln[len(_worker.PREFIX):] for ln in lines if ln.startswith(_worker.PREFIX)]
    if mine:
        return mine[-1]
    what = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    return f"the golden run ended with {what}" + (f": {lines[-1][:300]}" if lines else "")


def worker_env(worktree: Path) -> dict[str, str]:
    env = dict(os.environ)
    first = [str(worktree)] + ([str(worktree / "src")] if (worktree / "src").is_dir() else [])
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*first, str(_SIGNALCHAIN_HOME), *rest])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Stop the worker's whole process group: a pipeline's own workers must not outlive the probe."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.communicate()


class CommitRunner:
    """Runs the golden batch at commits of `root`, each at most once per cache."""

    def __init__(self, root: Path, spec: str, seed: int, *, cache: Path | None, timeout: float,
                 python: str = sys.executable):
        self.root, self.spec, self.seed = root, spec, seed
        self.cache, self.timeout, self.python = cache, timeout, python
        self.runs = 0  # real golden runs
        self.hits = 0  # answered from the cache

    # -- the cache ---------------------------------------------------------------------------
    def _lookup(self, sha: str) -> RunResult | None:
        if self.cache is None:
            return None
        entry = self.cache / cache_key(sha, self.spec, self.seed)
        try:
            meta = json.loads((entry / "result.json").read_text())
            if meta.get("ok"):
                return RunResult(load_golden(entry / "golden").trace, cached=True)
            return RunResult(None, str(meta.get("reason") or "could not run"), cached=True)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, SignalchainError):  # a damaged entry: drop it and run again
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def _store(self, sha: str, staged: Path, ok: bool, reason: str) -> None:
        """Move the staged entry into the cache (or drop it when another run got there first)."""
        entry = self.cache / cache_key(sha, self.spec, self.seed)  # type: ignore[operator]
        meta = {"ok": ok, "reason": reason, "commit": sha, "spec": self.spec, "seed": self.seed,
                "signalchain": __version__}
        write_text_atomic(staged / "result.json", json.dumps(meta, indent=1) + "\n")
        try:
            os.rename(staged, entry)
        except OSError:
            shutil.rmtree(staged, ignore_errors=True)

    # -- one run -----------------------------------------------------------------------------
    def run(self, sha: str) -> RunResult:
        hit = self._lookup(sha)
        if hit is not None:
            self.hits += 1
            return hit
        if self.cache is not None:
            self.cache.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}.", suffix=".tmp", dir=self.cache))
        else:
            staged = Path(tempfile.mkdtemp(prefix="signalchain-bisect-run-"))
        self.runs += 1
        start = time.perf_counter()
        try:
            with worktree_at(self.root, sha) as wt:
                code, reason = self._spawn(wt, staged / "golden")
            seconds = time.perf_counter() - start
            if code == 0:
                trace = load_golden(staged / "golden").trace
                if self.cache is not None:
                    self._store(sha, staged, True, "")
                return RunResult(trace, seconds=seconds)
            if self.cache is not None and code is not None:  # a timeout (None) is not cached
                self._store(sha, staged, False, reason)
            return RunResult(None, reason, seconds=seconds)
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def _spawn(self, worktree: Path, out: Path) -> tuple[int | None, str]:
        """Run the worker; (exit status, reason), status None when it ran past the timeout."""
        cmd = [self.python, str(_WORKER), "--spec", self.spec, "--seed", str(self.seed), "--out", str(out)]
        proc = subprocess.Popen(cmd, cwd=worktree, env=worker_env(worktree), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return None, f"the golden run took longer than --timeout {self.timeout:g} s and was stopped"
        except BaseException:  # Ctrl-C: the worker must not outlive signalchain
            kill_group(proc)
            raise
        return proc.returncode, "" if proc.returncode == 0 else _reason(stderr, proc.returncode)
