"""A hand-written DDP loop obeying `Monitor.check()` (2 gloo ranks under torchrun): a loss that is
non-finite on one rank only, while the all-reduced gradient is finite, is reported there but does not
withhold the update, so the replicas stay bitwise equal. Each job has a hard deadline."""

from __future__ import annotations

import socket
from pathlib import Path

from _rank_jobs import run_ranks

SCRIPT = Path(__file__).with_name("_ddp_loop.py")
DEADLINE_S = 120


def _run(scenario: str, tmp: Path) -> dict[int, dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp / scenario
    out.mkdir()
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    return run_ranks([*launcher, str(SCRIPT), scenario, str(out)], out, DEADLINE_S)


def test_one_ranks_nan_loss_keeps_the_update_and_the_replicas_equal(tmp_path: Path) -> None:
    res = _run("nan", tmp_path)
    assert res[0]["error"] is None and res[1]["error"] is None, res
    assert res[0]["weights"] == res[1]["weights"]
    assert res[1]["kept"] == [3] and res[1]["summary"]["skipped"] == 0 and res[1]["summary"]["fired"] == [3]
    kept = [f for f in res[1]["findings"] if f["id"] == "optim.update_kept"]
    assert kept and kept[0]["evidence"]["rank"] == 1 and kept[0]["severity"] == "info"
    assert any(f["severity"] == "error" for f in res[1]["findings"])  # the NaN loss itself is still reported
    assert res[0]["findings"] == [] and res[0]["kept"] == []


def test_without_a_process_group_the_same_nan_loss_withholds_the_update() -> None:
    import torch

    from signalchain import Monitor

    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    monitor = Monitor(net, opt, on_finding=lambda f: None)
    with monitor.step(None):
        loss = net(torch.ones(2, 4)).sum() + torch.tensor(float("nan"))
        loss.backward()
        assert monitor.check(loss) is False
    assert monitor.kept == [] and monitor.summary()["skipped"] == 1
    assert not any(f.id == "optim.update_kept" for f in monitor.findings)
