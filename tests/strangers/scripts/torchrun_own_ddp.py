"""(g2) A hand-written DDP loop launched with `torchrun --nproc_per_node 2` on CPU (gloo): `no_sync()`
accumulation, a DistributedSampler, clipping, and `Monitor` + `RankWatch` + the watchdog
(`_ddp_job.py`). A real process group with a hard deadline; the whole group is killed after."""

from __future__ import annotations

from pathlib import Path

from .. import _bed
from .torchrun_seq2seq import DEADLINE_S, ranks_run

IDIOM = "torchrun own DDP loop: no_sync() accumulation, DistributedSampler, Monitor + RankWatch + watchdog"
ALLOWED: dict[str, str] = {}
SLOW = True
JOB = Path(__file__).with_name("_ddp_job.py")


def main(seed: int, out: Path) -> _bed.Run:
    return ranks_run("torchrun_own_ddp", JOB, [str(seed), str(out)], out, seed, DEADLINE_S)
