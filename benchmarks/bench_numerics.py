"""What watching for NaN costs: the always-on Monitor, the locator's replay, and detect_anomaly.

    .venv/bin/python benchmarks/bench_numerics.py [--reps 15] [--threads 1]

One training step of the reference pipeline (data preparation, forward, backward, AdamW update),
timed in the same run, interleaved, median of `reps`:
  plain        the step as a user's loop runs it
  monitor      the same step inside `with monitor.step(batch)` + `monitor.check(loss)` (budget <= 1.03x)
  anomaly      the same step under torch.autograd.set_detect_anomaly(True) (for comparison)
  locate       the locator's replay of the step: forward and backward under the op-level watch, every
               tap checked (budget <= 2x one plain step)
  locate/nan   the same replay when the step does go NaN (a LayerNorm with eps=0), for information
Ratios are to `plain`; absolute times are printed too but mean little on a shared machine. On a
loaded machine the in-loop ratios wander by +-10 %: the monitor's own work is also timed alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from signalchain import Monitor
from signalchain.experiments.numerics.locate import locate
from signalchain.reference import ReferencePipeline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")

    p = ReferencePipeline()
    batch = p.golden_batch(0)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    monitor = Monitor(model, opt, replay=lambda m, b: p.step(m, b).loss)
    bad = ReferencePipeline(faults=["cond_layernorm_eps_zero"])
    bad_model = bad.build_model(0)

    def plain() -> None:
        loss = p.step(model, batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def monitored() -> None:
        with monitor.step(batch):
            loss = p.step(model, batch).loss
            loss.backward()
            if monitor.check(loss):
                opt.step()
            opt.zero_grad(set_to_none=True)

    def anomaly() -> None:
        with torch.autograd.set_detect_anomaly(True):
            plain()

    def located() -> None:
        locate(p, model, batch)
        model.zero_grad(set_to_none=True)

    def located_nan() -> None:
        locate(bad, bad_model, batch)
        bad_model.zero_grad(set_to_none=True)

    runs: dict[str, Callable[[], None]] = {"plain": plain, "monitor": monitored, "anomaly": anomaly,
                                           "locate": located, "locate/nan": located_nan}
    for fn in runs.values():  # warm up: codec cache, allocator, dispatch tables
        fn()
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.reps):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    # Ratios within each round (the same seconds of machine load), then their median: robust to drift.
    paired = {k: statistics.median(a / b for a, b in zip(v, times["plain"])) for k, v in times.items()}
    # The monitor's own work alone (step context + check on a finished backward), many times over.
    loss = p.step(model, batch).loss
    loss.backward()
    t0 = time.perf_counter()
    for _ in range(200):
        with monitor.step(batch):
            monitor.check(loss)
    own = (time.perf_counter() - t0) / 200
    opt.zero_grad(set_to_none=True)
    budget = {"monitor": "<= 1.03x", "locate": "<= 2x", "anomaly": "(1.4-4.5x expected)"}
    print(f"reference pipeline, batch of {len(batch)}, {args.threads} thread(s), {args.reps} interleaved rounds")
    best = {k: min(v) for k, v in times.items()}
    print(f"  {'':11s} {'median':>9s}   {'ratio of medians':>16s}   {'of minima':>9s}   {'median paired ratio':>19s}")
    for name, t in med.items():
        print(f"  {name:11s} {t * 1e3:6.1f} ms   {t / med['plain']:15.2f}x   {best[name] / best['plain']:8.2f}x"
              f"   {paired[name]:18.2f}x   {budget.get(name, '')}")
    print(f"  monitor's own work per step: {own * 1e3:.2f} ms = {1 + own / med['plain']:.3f}x plain (budget <= 1.03x)")
    assert not monitor.findings, monitor.findings


if __name__ == "__main__":
    main()
