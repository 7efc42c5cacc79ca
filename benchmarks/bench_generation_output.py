"""Cost of the generation and output families on the reference pipeline, as ratios to one training step.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_generation_output.py [economy|business|full]

Prints CPU seconds (process time: robust to other work on the machine, unlike wall time) per phase,
and each family's cost in units of one plain training step measured in the same run. The data
family runs first, as `--symptom repetitive` runs it, so that shared caches are warm as in scoring.
"""

from __future__ import annotations

import sys
import time

import torch

from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import FAMILIES, select_families
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline


def main(budget: str = "economy") -> None:
    torch.set_num_threads(1)
    select_families()  # registers the families
    p = ReferencePipeline()
    ctx = Context(ProtocolView(p), seed=0, budget=BUDGETS[budget])
    ctx.golden()
    model = ctx.fresh_model()
    opt = p.build_optimizer(model)
    batch = ctx.batch()
    p.train_step(model, opt, batch)  # warm-up (imports, caches)
    t0 = time.process_time()
    for _ in range(5):
        p.train_step(model, opt, batch)
    step = (time.process_time() - t0) / 5
    FAMILIES["data"].run(ctx)
    print(f"budget {budget}: one training step {step * 1000:.0f} ms CPU")
    for name in ("generation", "output"):
        before = dict(ctx.timings)
        t0 = time.process_time()
        FAMILIES[name].run(ctx)
        cpu = time.process_time() - t0
        phases = {k: v - before.get(k, 0.0) for k, v in ctx.timings.items() if k.startswith(name + ".")}
        print(f"  {name:10s} {cpu:5.2f} s CPU = {cpu / step:5.1f} training steps  (wall per phase: "
              + ", ".join(f"{k.split('.', 1)[1]} {v:.2f} s" for k, v in phases.items()) + ")")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "economy")
