"""RankWatch on real gloo runs (2 and 3 ranks, DDP on CPU), each fault injected for real.

Every launch has a hard deadline and kills what is left; ranks meet through a FileStore in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")

WORKER = Path(__file__).with_name("_dist_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"
DEADLINE_S = 90.0


def _launch(scenario: str, world: int, tmp: Path) -> dict[int, dict]:
    """Run every rank of `scenario`; their JSON results by rank (missing: the rank wrote none)."""
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               OMP_NUM_THREADS="1", TORCH_FR_BUFFER_SIZE="64")
    out = tmp / scenario
    out.mkdir()
    procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(r), str(world),
                               str(tmp / f"store-{scenario}"), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            try:
                logs.append(p.communicate(timeout=DEADLINE_S)[0].decode(errors="replace"))
            except subprocess.TimeoutExpired:
                logs.append("(killed at the deadline)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    results = {}
    for r in range(world):
        f = out / f"rank{r}.json"
        if f.exists():
            results[r] = json.loads(f.read_text())
    assert len(results) == world, "ranks wrote no result:\n" + "\n---\n".join(log[-3000:] for log in logs)
    return results


def _ids(findings: list[dict]) -> list[str]:
    return [f["id"] for f in findings]


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    return _launch("phases", 2, tmp_path_factory.mktemp("dist"))


def test_clean_two_rank_run_raises_nothing(phases: dict[int, dict]) -> None:
    assert phases[0]["clean"] == [] and phases[1]["clean"] == []


def test_sleeping_rank_is_the_straggler_in_its_loader(phases: dict[int, dict]) -> None:
    found = [f for f in phases[0]["straggler"] if f["id"] == "dist.straggler"]
    assert found, phases[0]["straggler"]
    assert {f["evidence"]["rank"] for f in found} == {1}  # rank 0's waiting backward is not named
    assert all(f["evidence"]["section"] == "loader" for f in found)
    assert _ids(phases[0]["straggler"]) == ["dist.straggler"] * len(found)
    assert phases[1]["straggler"] == []  # rank 0 judges; other ranks keep nothing of it


def test_nudged_weights_name_the_parameter(phases: dict[int, dict]) -> None:
    found = [f for f in phases[0]["nudge"] if f["id"] == "dist.param_divergence"]
    assert found, phases[0]["nudge"]
    f = found[0]
    assert f["evidence"]["parameter"] == "module.2.weight" and f["evidence"]["ranks"] == [1]
    assert f["evidence"]["differing"] == 1  # only the nudged tensor; DDP keeps the rest equal
    assert f["evidence"]["max_abs_diff"]["1"] == pytest.approx(1e-3, rel=0.05)
    assert f["evidence"]["step"] >= 7  # the nudge came after step 7's update
    assert "dist.desync" not in _ids(phases[0]["nudge"])


def test_extra_all_reduce_is_a_desync_naming_the_collective(tmp_path: Path) -> None:
    res = _launch("extra_allreduce", 2, tmp_path)
    for r in (0, 1):
        found = [f for f in res[r]["findings"] if f["id"] == "dist.desync"]
        assert found, res[r]
        ev = found[0]["evidence"]
        assert ev["kind"] == "collective" and ev["missing_ranks"] == [0] and ev["joined"] == [1]
        assert "all_reduce [1] float" in found[0]["message"]
        assert "side group" in found[0]["message"]  # where rank 0 waits instead
    assert any(f["id"] == "perf.stall" for f in res[0]["watchdog"])


def test_barrier_against_all_reduce_names_both_operations(tmp_path: Path) -> None:
    res = _launch("barrier", 2, tmp_path)
    f = next(f for f in res[0]["findings"] if f["id"] == "dist.desync")
    ev = f["evidence"]
    assert ev["kind"] == "collective" and len(ev["missing_ranks"]) == 1
    assert {ev["ranks"]["0"]["collective"], ev["ranks"]["1"]["collective"]} == {
        "barrier", "all_reduce [1] float"}
    assert ev["ranks"]["0"]["seq"] == ev["ranks"]["1"]["seq"] == ev["seq"]  # same id, other op


def _reduce_line() -> int:
    return next(i for i, t in enumerate(WORKER.read_text().splitlines(), 1) if "a logging reduce under" in t)


def test_rank_0_only_reduce_is_caught_before_it_runs_against_a_python_collective(tmp_path: Path) -> None:
    # rank 1's next collective is the buffer broadcast of its next forward: both ranks check and both name it
    res = _launch("rank0_reduce_buffered", 2, tmp_path)
    for r in (0, 1):
        [f] = [f for f in res[r]["findings"] if f["evidence"].get("kind") == "mismatch"]
        assert f"rank 0 calls all_reduce [1] float32 at {WORKER}:{_reduce_line()}" in f["message"]
        assert "rank 1 calls broadcast_coalesced [4, 4] float32" in f["message"]
        assert f["evidence"]["calls"]["1"]["site"].startswith(str(WORKER))
        assert res[r]["error"].startswith("CollectiveMismatch")  # raised instead of an abort inside gloo
    assert not [f for f in res[0]["watchdog"] if f["id"] == "perf.stall"]  # caught at once, no hang


def test_rank_0_only_reduce_against_ddps_gradient_all_reduce_is_caught_through_the_stall(tmp_path: Path) -> None:
    # rank 1's next collective is DDP's gradient all-reduce, issued from C++: it hangs there, its watchdog
    # publishes the flight recorder's pending collective, and rank 0's check reads it
    res = _launch("rank0_reduce", 2, tmp_path)
    [f] = [f for f in res[0]["findings"] if f["evidence"].get("kind") == "mismatch"]
    assert f"rank 0 calls all_reduce [1] float32 at {WORKER}:{_reduce_line()}" in f["message"]
    assert "rank 1 calls all_reduce [676] float32" in f["message"]
    assert res[0]["error"].startswith("CollectiveMismatch")
    assert "hung_rank" not in [g["evidence"].get("kind") for g in res[0]["findings"]]  # rank 0 waits in a check


def test_blocked_rank_is_named_hung_on_every_other_rank(tmp_path: Path) -> None:
    res = _launch("blocked", 3, tmp_path)
    for r in (0, 2):
        hung = [f for f in res[r]["findings"] if f["evidence"].get("kind") == "hung_rank"]
        assert hung, res[r]
        assert hung[0]["id"] == "dist.desync" and hung[0]["evidence"]["hung_ranks"] == [1]
        assert hung[0]["evidence"]["ranks"]["1"]["phase"] == "loader"
        assert "_dist_worker.py" in hung[0]["message"]  # the blocked rank's own line
    # Three ranks on a shared 2-core machine ran clean up to the hang: no straggler named.
    assert "dist.straggler" not in _ids(res[0]["findings"])


def test_without_a_process_group_it_is_a_cheap_no_op() -> None:
    import torch

    from signalchain.monitor import RankWatch

    assert not dist.is_initialized()
    rw = RankWatch(torch.nn.Linear(3, 2), every=1)
    with rw.section("forward"):
        pass
    rw.add_time("loader", 0.01)
    for step in range(3):
        rw.step_end(step)
    assert (rw.rank, rw.world, rw.findings) == (0, 1, [])
    assert rw.on_stall({"step": 2, "phase": "forward", "since_s": 9.0}) == []
    rw.close()
