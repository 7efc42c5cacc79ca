"""Running a multi-rank job script for a test: a hard deadline, the whole process group killed after,
and each rank's `rank<R>.json` read back; plus the codec-like codes the HF MusicGen jobs train on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def run_ranks(args: list[str], out: Path, deadline_s: float, ranks: int = 2, **env_changes: str | None) -> dict:
    """`python ARGS...` in its own session; returns {rank: its json}, asserting every rank wrote one."""
    path = os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])  # scripts import from tests/
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        log = proc.communicate(timeout=deadline_s)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        log = "(killed at the deadline)"
    finally:  # the other ranks are children of the launcher: the session's whole group goes
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    results = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)
               if (out / f"rank{r}.json").exists()}
    assert len(results) == ranks, f"ranks wrote {sorted(results)}:\n{log[-4000:]}"
    return results


def held_codes(g: torch.Generator, codebooks: int, frames: int, cardinality: int) -> torch.Tensor:
    """Codes [1, K, T] that hold on for a few frames, as codec tokens of real audio do."""
    out = torch.randint(0, cardinality, (1, codebooks, 1), generator=g).repeat(1, 1, frames)
    for t in range(1, frames):
        change = torch.rand(1, codebooks, generator=g) < 0.3
        fresh = torch.randint(0, cardinality, (codebooks,), generator=g)
        out[0, :, t] = torch.where(change[0], fresh, out[0, :, t - 1])
    return out
