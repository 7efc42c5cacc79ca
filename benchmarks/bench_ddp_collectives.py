"""What the rank watch's collective timing and its cross-rank check of each collective cost under DDP.

    .venv/bin/python benchmarks/bench_ddp_collectives.py [--world 2] [--steps 60] [--rounds 4] [--width 256]

Spawns `--world` gloo ranks on this machine (CPU), each training a DDP model with a registered
buffer (a causal mask: DDP broadcasts it from Python at the start of every forward, so every step has
one Python-level collective besides the gradient all-reduce from C++) and, every 10 steps, one
logging all-reduce of the loss on every rank (Lightning's `sync_dist`). Configurations, interleaved
round by round in the same processes:
  bare      no RankWatch
  timing    RankWatch (every=50): section clock, and the time inside Python-level collectives moved
            into the synchronising "collective" section
  check     RankWatch(check_collectives=True): also each Python-level collective's op, dtypes and sizes
            compared across ranks through the store before it runs
The time of a step is wall time from one step's start to the next's; median over the steps after
the first 5 of every round, then the median over rounds. Each round also times 300 back-to-back
all-reduces of one float on every rank (the latency a check adds to one collective, the step's own
work left out). Rank 0 prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

CONFIGS = ("bare", "timing", "check")


def _model(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                              torch.nn.GELU(), torch.nn.Linear(width, 16))
    net.register_buffer("causal", torch.tril(torch.ones(16, 16)))
    return net


def _round(config: str, rank: int, steps: int, width: int) -> list[float]:
    from signalchain.monitor.distributed import RankWatch

    model = DDP(_model(width))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rw = None if config == "bare" else RankWatch(model, every=50, check_collectives=config == "check")
    gen = torch.Generator().manual_seed(rank)
    times, last = [], time.perf_counter()
    for step in range(steps):
        x, y = torch.randn(64, width, generator=gen), torch.randn(64, 16, generator=gen)
        ctx = rw.section if rw is not None else None
        if ctx is not None:
            with ctx("forward"):
                loss = torch.nn.functional.mse_loss(model(x) @ model.module.causal, y)
            with ctx("backward"):
                opt.zero_grad()
                loss.backward()
            with ctx("optimizer"):
                opt.step()
        else:
            loss = torch.nn.functional.mse_loss(model(x) @ model.module.causal, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step % 10 == 0:
            dist.all_reduce(loss.detach().reshape(1))  # a logged metric, synced on every rank
        if rw is not None:
            rw.step_end(step)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    if rw is not None:
        rw.close()
    return times[5:]


def _per_collective(config: str, n: int = 300) -> float:
    """Seconds per all_reduce of one float, all ranks calling it back to back (the check's latency)."""
    from signalchain.monitor.distributed import RankWatch

    rw = None if config == "bare" else RankWatch(torch.nn.Linear(2, 2), every=10**9,
                                                 check_collectives=config == "check")
    t = torch.ones(1)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t)
    took = (time.perf_counter() - start) / n
    if rw is not None:
        rw.close()
    return took


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    torch.set_num_threads(1)  # a TCPStore, as torchrun and Lightning use (a FileStore is far slower per key)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    med: dict[str, list[float]] = {c: [] for c in CONFIGS}
    per: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for _ in range(args.rounds):
        for config in CONFIGS:
            dist.barrier()
            med[config].append(statistics.median(_round(config, rank, args.steps, args.width)))
            per[config].append(_per_collective(config))
    if rank == 0:
        bare = statistics.median(med["bare"])
        lines = [f"world {world}, width {args.width}, {args.steps} steps x {args.rounds} rounds "
                 f"(torch {torch.__version__}, {os.cpu_count()} cpus)"]
        for config in CONFIGS:
            m = statistics.median(med[config])
            lines.append(f"{config:7s} median step {m * 1e3:8.3f} ms  {m / bare:5.3f}x  "
                         f"(rounds: {', '.join(f'{v * 1e3:.2f}' for v in med[config])});  one all_reduce "
                         f"of 1 float: {statistics.median(per[config]) * 1e6:7.1f} us")
        with open(out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.txt")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_worker, args=(args.world, port, args, out), nprocs=args.world, join=True)
        sys.stdout.write(open(out).read())


if __name__ == "__main__":
    main()
