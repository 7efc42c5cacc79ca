"""`signalchain doctor` on a bed, every family, against the 60 s budget (DESIGN §7).

    .venv/bin/python benchmarks/bench_doctor.py [--bed reference|hf|symbolic] [--budget business] [--seeds 0]

`--bed hf` runs it on the tiny Hugging Face MusicGen pipeline (`signalchain.reference.hf`), `--bed symbolic`
on the caption-conditioned REMI bed (`signalchain.reference.symbolic`).
Prints the wall time of each family and of the whole run, and (for scale, in the same run) the time
of one plain training step of the reference pipeline, so the doctor's cost reads as a number of steps.
"""

from __future__ import annotations

import argparse
import time

import torch

from signalchain.experiments.doctor import run_doctor
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline


def make_bed(name: str):
    if name == "hf":
        from signalchain.reference.hf import HFBedPipeline

        return HFBedPipeline()
    if name == "symbolic":
        from signalchain.reference.symbolic import SymbolicBedPipeline

        return SymbolicBedPipeline()
    return ReferencePipeline()


def plain_step_seconds(pipe, n: int = 10) -> float:
    model = pipe.build_model(0)
    opt = pipe.build_optimizer(model)
    batch = pipe.golden_batch(0)
    pipe.train_step(model, opt, batch)
    t0 = time.perf_counter()
    for _ in range(n):
        pipe.train_step(model, opt, batch)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bed", default="reference", choices=("reference", "hf", "symbolic"))
    ap.add_argument("--budget", default="business")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pipe = make_bed(args.bed)
    step = plain_step_seconds(pipe)
    print(f"torch threads {torch.get_num_threads()} · one plain train step of {pipe.name}: {step * 1000:.0f} ms")
    for seed in [int(s) for s in args.seeds.split(",")]:
        r = run_doctor(ProtocolView(make_bed(args.bed)), seed=seed, budget=args.budget)
        fam = {k: v for k, v in r.timings.items() if "." not in k}
        errors = [f.id for f in r.findings if f.severity.value in ("error", "warning")]
        print(f"seed {seed}: every family ({', '.join(r.families)}) in {r.seconds:.1f} s "
              f"= {r.seconds / step:.0f} plain steps; budget 60 s: {'within' if r.seconds <= 60 else 'OVER'}; "
              f"errors and warnings on the clean pipeline: {errors or 'none'}")
        for name, secs in fam.items():
            print(f"    {name:14s} {secs:6.1f} s")


if __name__ == "__main__":
    main()
