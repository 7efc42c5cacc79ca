"""Stall watchdog cost per step, measured in one run (DESIGN §7: "no measurable cost per step"):

    .venv/bin/python benchmarks/bench_watchdog.py [--quick]

1. `beat()` alone, and a step's worth of calls (two `phase` blocks and a `beat`), in nanoseconds
   (the watchdog thread running beside them), and that as a share of the step below;
2. a small training step (MLP forward, backward, AdamW) with and without `beat` and two
   `phase(...)` blocks, alternated in rounds so that machine noise falls on both; the ratio of
   the medians is printed (on a loaded machine it wanders by several % either way: the share in 1
   is the figure to trust).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import signalchain


def call_costs(n: int) -> tuple[float, float]:
    """(ns per `beat`, ns per step's worth of calls: two `phase` blocks and a `beat`)."""
    with signalchain.watchdog(timeout=60.0) as wd:
        t = time.perf_counter()
        for _i in range(n):
            pass
        empty = (time.perf_counter() - t) / n
        t = time.perf_counter()
        for i in range(n):
            wd.beat(i)
        beat = (time.perf_counter() - t) / n - empty
        t = time.perf_counter()
        for i in range(n):
            with wd.phase("forward"):
                pass
            with wd.phase("backward"):
                pass
            wd.beat(i)
        step = (time.perf_counter() - t) / n - empty
    return beat * 1e9, step * 1e9


def step_ratio(rounds: int, steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def bare() -> float:  # the same loop as `watched`, less the watchdog's calls
        t = time.perf_counter()
        for _ in range(steps):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t) / steps

    def watched(wd: signalchain.Watchdog) -> float:
        t = time.perf_counter()
        for i in range(steps):
            with wd.phase("forward"):
                loss = model(x).pow(2).mean()
            with wd.phase("backward"):
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            wd.beat(i)
        return (time.perf_counter() - t) / steps

    for _ in range(steps):
        step()  # warm-up: allocator, kernels
    plain, on = [], []
    with signalchain.watchdog(timeout=60.0) as wd:
        for _ in range(rounds):
            plain.append(bare())
            on.append(watched(wd))
    return statistics.median(plain), statistics.median(on)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds, steps = (200_000, 5, 50) if args.quick else (2_000_000, 15, 100)
    beat, calls = call_costs(n)
    plain, on = step_ratio(rounds, steps)
    print(f"beat(): {beat:.0f} ns per call; two phase() blocks and a beat: {calls:.0f} ns per step, "
          f"{calls * 1e-9 / plain:.3%} of the bare step below")
    print(f"training step (MLP 64-256-64, batch 32, AdamW): bare {plain * 1e3:.3f} ms, "
          f"watched {on * 1e3:.3f} ms, ratio {on / plain:.3f}× (budget: no measurable cost)")


if __name__ == "__main__":
    main()
