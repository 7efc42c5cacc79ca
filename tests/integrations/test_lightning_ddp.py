"""A real Lightning DDP run (accelerator="cpu", devices=2, strategy="ddp", gloo) with the callback.

Each scenario runs `_lightning_ddp.py` as its own process (Lightning starts rank 1 by running it
again); the faults are real (a rank that loads slowly, a rank whose weights are nudged, a rank that
blocks forever, a rank whose batch makes a NaN) and each must be named by rank 0's callback: the
rank, the section, the parameter, the collective the others wait in, the op that made the NaN. The
model holds a buffer (DDP broadcasts it inside every forward) and the trainer keeps Lightning's
default logger. A clean run raises nothing although every exchange ran.
Every run has a hard deadline, and its whole process group is killed afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from _rank_jobs import run_ranks  # noqa: E402

SCRIPT = Path(__file__).with_name("_lightning_ddp.py")
DEADLINE_S = 180


def _run(scenario: str, tmp: Path) -> dict[int, dict]:
    out = tmp / scenario
    out.mkdir()
    return run_ranks([str(SCRIPT), scenario, str(out)], out, DEADLINE_S, MASTER_PORT=None)  # Lightning picks one


def _ids(result: dict) -> list[str]:
    return [f["id"] for f in result["findings"]]


def test_clean_two_rank_run_raises_nothing(tmp_path: Path) -> None:
    res = _run("clean", tmp_path)
    for r in (0, 1):
        assert res[r]["world"] == 2 and res[r]["steps"] == 30
        assert res[r]["rank_watched"], "the callback did not start a rank watch under DDP"
        assert [f for f in res[r]["findings"] if f["severity"] in ("error", "warning")] == []


def test_a_rank_that_loads_slowly_is_named_a_straggler(tmp_path: Path) -> None:
    res = _run("straggler", tmp_path)
    found = [f for f in res[0]["findings"] if f["id"] == "dist.straggler"]
    assert len(found) == 1, res[0]["findings"]
    ev = found[0]["evidence"]
    assert ev["rank"] == 1 and ev["section"] == "loader"
    # rank 0 waits for rank 1 in DDP's gradient all-reduce (backward) and in its buffer broadcast at the
    # start of every forward (a collective inside forward): both synchronisation, so it is no straggler
    assert "backward" in ev["synchronising"] and "collective" in ev["synchronising"]
    assert ev["seconds"]["0"]["collective"] > ev["seconds"]["0"]["forward"]
    assert [f for f in res[0]["findings"] if f["id"] != "dist.straggler" and f["severity"] != "info"] == []


def test_nudged_weights_on_one_rank_are_named_by_parameter(tmp_path: Path) -> None:
    res = _run("nudge", tmp_path)
    found = [f for f in res[0]["findings"] if f["id"] == "dist.param_divergence"]
    assert len(found) == 1, res[0]["findings"]
    ev = found[0]["evidence"]
    assert ev["parameter"] == "net.2.weight" and ev["ranks"] == [1] and ev["differing"] == 1
    assert ev["max_abs_diff"]["1"] == pytest.approx(1e-3, rel=0.01)


def test_a_blocked_rank_is_named_by_the_rank_that_waits_for_it(tmp_path: Path) -> None:
    res = _run("blocked", tmp_path)
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "time.sleep(600)" in text)
    hung = [f for f in res[0]["findings"] if f["id"] == "dist.desync"]
    assert len(hung) == 1, res[0]["findings"]
    assert hung[0]["evidence"]["kind"] == "hung_rank" and hung[0]["evidence"]["hung_ranks"] == [1]
    assert f"_lightning_ddp.py:{line}" in hung[0]["message"]  # where rank 1 is stuck
    # rank 0's own stall: inside DDP's gradient all-reduce (its Python stack only says backward)
    stall = [f for f in res[0]["findings"] if f["id"] == "perf.stall"]
    assert len(stall) == 1 and stall[0]["evidence"]["phase"] == "collective"
    assert stall[0]["evidence"]["collective"].startswith("all_reduce")
    # rank 1's stall names its own line
    own = [f for f in res[1]["findings"] if f["id"] == "perf.stall"]
    assert len(own) == 1 and own[0]["evidence"]["site"].endswith(f"_lightning_ddp.py:{line}")


def test_a_nan_from_rank_1s_batch_is_located_in_rank_0s_findings(tmp_path: Path) -> None:
    res = _run("nan", tmp_path)
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "torch.log(x - 10.0)" in text)
    on_disk = json.loads((tmp_path / "nan" / "live" / "findings.json").read_text())
    for findings in (res[0]["findings"], on_disk["findings"]):  # the callback's list and rank 0's findings.json
        copied = [f for f in findings if f["evidence"].get("rank") == 1 and f["id"] == "nonfinite.first"]
        assert len(copied) == 1, findings
        assert copied[0]["evidence"]["step"] == 7 and f"_lightning_ddp.py:{line}" in copied[0]["message"]
        assert copied[0]["message"].startswith("rank 1:")
        own = [f for f in findings if f["evidence"].get("rank") == 0]
        assert len(own) == 1 and own[0]["evidence"]["origin_ranks"] == [1], own
        assert "rank 1's batch" in own[0]["message"] and "replay=" not in own[0]["hint"]
    assert res[0]["steps"] == 30  # the update of step 7 was withheld; the run went on


def test_a_rank_0_only_all_reduce_is_caught_before_gloo_aborts(tmp_path: Path) -> None:
    res = _run("reduce0", tmp_path)
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "a logging reduce under" in text)
    on_disk = json.loads((tmp_path / "reduce0" / "live" / "findings.json").read_text())
    for findings in (res[0]["findings"], on_disk["findings"]):
        [f] = [f for f in findings if f["evidence"].get("kind") == "mismatch"]
        assert f["id"] == "dist.desync" and f["severity"] == "error"
        assert f"rank 0 calls all_reduce [1] float32 at {SCRIPT}:{line}" in f["message"]
        assert "rank 1 calls all_reduce [676] float32" in f["message"]  # DDP's gradient all-reduce
    assert res[0]["error"].startswith("CollectiveMismatch")  # not gloo's EnforceNotMet
