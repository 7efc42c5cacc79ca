"""The profiled replay's overhead on a training step, against the 3 × budget (DESIGN §7).

    .venv/bin/python benchmarks/bench_profile.py [--repeats 3] [--steps 3]

Each repeat builds a fresh model, runs one warm-up and one plain update (timed), then `--steps`
updates under the profile by stage (torch.profiler with memory and shapes, the stage clock and the
line sampler). The ratio is the profiled update (the loader's wait left out, as in the plain one)
over the plain update of the same repeat; the median over repeats is printed with each repeat's,
and the process's one-off profiler start-up (kineto) apart.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from signalchain.experiments.context import Context
from signalchain.experiments.profile import _quiet_stderr, profile_steps
from signalchain.reference import ReferencePipeline

BUDGET = 3.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t = time.perf_counter()
    with _quiet_stderr(), torch.autograd.profiler.profile(use_kineto=True, profile_memory=True):
        pass  # the entry the replay uses (torch.profiler.profile's wrapper would import inductor: seconds)
    startup = time.perf_counter() - t
    ratios = []
    for r in range(args.repeats):
        rep = profile_steps(Context(pipeline=ReferencePipeline(), seed=r), steps=args.steps)
        loader = rep.stage("loader")
        update = rep.step_ms - (loader.ms if loader is not None else 0.0)
        ratios.append(update / rep.plain_ms)  # type: ignore[operator]
        print(f"repeat {r}: plain update {rep.plain_ms:.1f} ms, profiled update {update:.1f} ms "
              f"(x{ratios[-1]:.2f}; loader wait {loader.ms if loader else 0:.1f} ms apart)")
    med = statistics.median(ratios)
    print(f"profiler start-up (once per process): {startup:.2f} s")
    print(f"profiled update / plain update: x{med:.2f} (median of {len(ratios)}), budget x{BUDGET:.0f}: "
          f"{'ok' if med <= BUDGET else 'OVER'}")


if __name__ == "__main__":
    main()
