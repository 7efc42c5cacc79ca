"""One rank of a real gloo run for tests/monitor/test_distributed.py (run as a script).

    python _dist_worker.py SCENARIO RANK WORLD STORE_FILE OUT_DIR

Scenarios: "phases" (clean, then rank 1 sleeps in its loader, then rank 1's weights are nudged:
one RankWatch each), "extra_allreduce" (rank 1 all-reduces a metric the others never match),
"blocked" (rank 1 sleeps forever before a step), "barrier" (rank 0 enters a barrier where rank 1
all-reduces), "rank0_reduce" / "rank0_reduce_buffered" (rank 0 alone all-reduces a logged metric
after step 7's update, with `check_collectives` on; the buffered model's next forward broadcasts its
buffer from Python, the other's next collective is DDP's gradient all-reduce from C++).
Writes OUT_DIR/rank{R}.json; a hang scenario writes once its RankWatch has a `dist.*` finding (or
a deadline passes) and leaves with os._exit.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from signalchain.monitor.distributed import RankWatch
from signalchain.monitor.watchdog import Watchdog

STEPS, EVERY = 20, 5
WD_TIMEOUT, RW_TIMEOUT = 1.5, 4.0
NUDGE_STEP, HANG_STEP, REDUCE_STEP = 7, 9, 7
BEATS: list[float] = []  # when each step ended (the stall is counted from the last one)


def _model(buffered: bool = False) -> DDP:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    if buffered:  # a causal mask: DDP broadcasts it at the start of every forward
        net.register_buffer("causal", torch.tril(torch.ones(4, 4)))
    return DDP(net)


def _train(model: DDP, rw: RankWatch, rank: int, *, slow: float = 0.0, nudge: bool = False,
           hang: str = "", wd: Watchdog | None = None) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        with rw.section("loader"):
            x, y = torch.randn(32, 16, generator=gen), torch.randn(32, 4, generator=gen)
            if slow and rank == 1:
                time.sleep(slow)
            if hang == "blocked" and rank == 1 and step == HANG_STEP:
                time.sleep(600)  # blocks past every timeout; the test's thread ends the process
        with rw.section("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with rw.section("backward"):
            opt.zero_grad()
            loss.backward()
        with rw.section("optimizer"):
            opt.step()
        if nudge and rank == 1 and step == NUDGE_STEP:
            with torch.no_grad():
                model.module[2].weight.add_(1e-3)
        if hang == "extra_allreduce" and rank == 1 and (step + 1) % EVERY == 0 and step > EVERY:
            dist.all_reduce(loss.detach().reshape(1))  # a metric only this rank reduces
        if hang == "barrier" and step == HANG_STEP:
            if rank == 0:
                dist.barrier()
            else:
                dist.all_reduce(loss.detach().reshape(1))
        if hang.startswith("rank0_reduce") and rank == 0 and step == REDUCE_STEP:
            dist.all_reduce(loss.detach().reshape(1))  # a logging reduce under `if rank == 0`
        rw.step_end(step)
        if wd is not None:
            wd.beat(step)
            BEATS.append(time.monotonic())


def _dump(out: str, rank: int, data: dict) -> None:
    path = os.path.join(out, f"rank{rank}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


def phases(rank: int, out: str) -> None:
    result = {}
    for name, kw in (("clean", {}), ("straggler", {"slow": 0.03}), ("nudge", {"nudge": True})):
        model = _model()
        rw = RankWatch(model, every=EVERY, timeout=RW_TIMEOUT)
        _train(model, rw, rank, **kw)
        rw.close()
        result[name] = [f.to_dict() for f in rw.findings]
    _dump(out, rank, result)
    dist.destroy_process_group()


def hang(scenario: str, rank: int, world: int, out: str) -> None:
    model = _model()
    rw = RankWatch(model, every=EVERY, timeout=RW_TIMEOUT)
    wd = Watchdog(WD_TIMEOUT, first_timeout=60.0, stall_hooks=[rw.on_stall])

    def report() -> None:  # the test's side: wait for the rank watch's verdict, then leave
        deadline, found = time.monotonic() + 40.0, None
        while time.monotonic() < deadline:
            if any(f.id == "dist.desync" for f in rw.findings):
                found = time.monotonic()
                break
            time.sleep(0.05)
        time.sleep(0.3)  # let the other ranks read this rank's state too
        # Seconds from the last completed step to the verdict: reported, never asserted.
        after = found - BEATS[-1] if found is not None and BEATS else None
        _dump(out, rank, {"findings": [f.to_dict() for f in rw.findings],
                          "watchdog": [f.to_dict() for f in wd.findings], "found_after_s": after,
                          "watchdog_timeout_s": WD_TIMEOUT})
        # Leave only when every rank has written (bounded): a rank that exits first closes its gloo
        # pairs, and a peer still waiting in the hung collective would then fail before its verdict.
        until = time.monotonic() + 15.0
        while time.monotonic() < until and not all(os.path.exists(os.path.join(out, f"rank{r}.json"))
                                                   for r in range(world)):
            time.sleep(0.05)
        os._exit(0)

    threading.Thread(target=report, daemon=True).start()
    wd.start()
    try:
        _train(model, rw, rank, hang=scenario, wd=wd)
    except RuntimeError:  # a peer left (gloo: "Connection closed by peer"): the report thread still writes
        pass
    time.sleep(60)  # a rank the fault spares waits here for the report thread


def mismatch(scenario: str, rank: int, out: str) -> None:
    """A collective only rank 0 makes, checked across ranks before it runs."""
    model = _model(buffered=scenario.endswith("buffered"))
    rw = RankWatch(model, every=EVERY, timeout=RW_TIMEOUT, check_collectives=True)
    wd = Watchdog(WD_TIMEOUT, first_timeout=60.0, stall_hooks=[rw.on_stall])
    wd.start()
    error = None
    try:
        _train(model, rw, rank, hang="rank0_reduce", wd=wd)
    except Exception as exc:  # the check's verdict; or a peer left (gloo: "Connection closed by peer")
        error = f"{type(exc).__name__}: {exc}"
    wd.stop()
    _dump(out, rank, {"findings": [f.to_dict() for f in rw.findings], "error": error,
                      "watchdog": [f.to_dict() for f in wd.findings]})
    os._exit(0)  # a peer may still be inside a collective: no clean teardown


if __name__ == "__main__":
    scenario, rank, world, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    if scenario == "phases":
        phases(rank, out)
    elif scenario.startswith("rank0_reduce"):
        mismatch(scenario, rank, out)
    else:
        hang(scenario, rank, world, out)
