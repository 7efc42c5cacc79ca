"""HF `Trainer` under `torchrun` (2 CPU ranks, gloo) with the callback, on a tiny T5-conditioned MusicGen:
a clean job raises nothing on either rank; rank 1's empty-label batch is located on rank 1 and rank 0's
findings carry that verdict with its rank. Each job has a hard deadline; its process group is killed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from _rank_jobs import run_ranks  # noqa: E402

SCRIPT = Path(__file__).with_name("_hf_torchrun.py")
DEADLINE_S = 240


def _free_port() -> int:
    with socket.socket() as s:  # torchrun's static rendezvous needs a real port (0 waits forever)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(scenario: str, tmp: Path) -> dict[int, dict]:
    out = tmp / scenario
    out.mkdir()
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port())]
    return run_ranks([*launcher, str(SCRIPT), scenario, str(out)], out, DEADLINE_S)


def test_a_clean_torchrun_job_is_silent_on_every_rank(tmp_path: Path) -> None:
    res = _run("clean", tmp_path)
    for r in (0, 1):
        assert res[r]["error"] is None and res[r]["world"] == 2 and res[r]["steps"] == 8
        assert [f for f in res[r]["findings"] if f["severity"] in ("error", "warning")] == []


def test_rank_1s_empty_labels_are_located_and_reach_rank_0(tmp_path: Path) -> None:
    res = _run("nan", tmp_path)
    own = [f for f in res[1]["findings"] if f["id"] == "nonfinite.first"]
    assert own and own[0]["evidence"]["cause"] == "empty_reduction"
    copied = [f for f in res[0]["findings"] if f["id"] == "nonfinite.first" and f["evidence"].get("rank") == 1]
    assert copied and copied[0]["evidence"]["cause"] == "empty_reduction", res[0]["findings"]
    # the all-reduced gradient was finite: rank 1 alone withholding the update would split the replicas
    assert res[0]["weights"] == res[1]["weights"] and res[0]["skipped"] == res[1]["skipped"] == 0
    assert any(f["id"] == "optim.update_kept" and f["evidence"]["rank"] == 1 for f in res[1]["findings"])
