"""(g) The dreambooth script (a) launched with `torchrun --nproc_per_node 2` on CPU (gloo): HF's DDP
wraps the peft model, each rank trains on its shard, the callback runs on both ranks (rank 0 gets
rank 1's verdicts). Run as a real process group with a hard deadline; the whole group is killed
after (`tests/_rank_jobs.run_ranks`). The findings of both ranks are the run's.
"""

from __future__ import annotations

import socket
from pathlib import Path

from .. import _bed

IDIOM = "torchrun --nproc_per_node 2 (gloo DDP) of the Seq2SeqTrainer + LoRA script"
ALLOWED: dict[str, str] = {}
SLOW = True
DEADLINE_S = 240
JOB = Path(__file__).with_name("_torchrun_job.py")


def _free_port() -> int:
    with socket.socket() as s:  # torchrun's static rendezvous needs a real port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks_run(name: str, job: Path, argv: list[str], out: Path, seed: int, deadline_s: float) -> _bed.Run:
    """Launch `job` on 2 ranks and fold their `rank<R>.json` into one run (each finding says its rank)."""
    from _rank_jobs import run_ranks

    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port())]
    ranks = run_ranks([*launcher, str(job), *argv], out, deadline_s)
    findings = [{**f, "evidence": {**f["evidence"], "reported_on_rank": r}} for r, res in sorted(ranks.items())
                for f in res["findings"]]
    errors = [f"rank {r}: {res['error']}" for r, res in ranks.items() if res["error"]]
    errors += [f"rank {r}: world {res['world']}, not 2" for r, res in ranks.items() if res["world"] != 2]
    return _bed.Run(name, seed, findings, min(res["steps"] for res in ranks.values()), ranks[0]["losses"],
                    all(res["moved"] for res in ranks.values()), "; ".join(errors) or None)


def main(seed: int, out: Path, *, lr: float = 2e-4) -> _bed.Run:
    return ranks_run("torchrun_seq2seq", JOB, [str(seed), str(out), str(lr)], out, seed, DEADLINE_S)
