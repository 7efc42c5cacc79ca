"""`signalchain doctor` on a bed, every family, against the 60 s budget (DESIGN §7).

    .venv/bin/python benchmarks/bench_doctor.py [--bed reference|hf|symbolic|all] [--budget business] [--seeds 0]

`--bed hf` runs it on the tiny Hugging Face MusicGen pipeline (`signalchain.reference.hf`), `--bed symbolic`
on the caption-conditioned REMI bed (`signalchain.reference.symbolic`).
`--bed all` runs the three in turn. Prints the wall time of each family and of the whole run with each
family's share, the process's CPU time (with `--threads 1`, about the wall time on an idle machine),
the machine's load average beside them (wall figures are only comparable at a like load),
the goal of issue 27 (25 s on the reference and HF beds, 20 s on the symbolic bed),
and (for
scale, in the same run) the time of one plain training step of the bed, so the doctor's cost reads as
a number of steps.
"""

from __future__ import annotations

import argparse
import os
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


GOALS = {"reference": 25.0, "hf": 25.0, "symbolic": 20.0}


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def bench(bed: str, budget: str, seeds: list[int]) -> None:
    t0 = time.perf_counter()
    pipe = make_bed(bed)
    built = time.perf_counter() - t0
    step = plain_step_seconds(pipe)
    print(f"[{bed}] torch threads {torch.get_num_threads()} · bed built in {built:.1f} s · one plain train step of "
          f"{pipe.name}: {step * 1000:.0f} ms · {load()}")
    for seed in seeds:
        cpu0 = time.process_time()
        r = run_doctor(ProtocolView(make_bed(bed)), seed=seed, budget=budget)
        cpu = time.process_time() - cpu0  # CPU seconds of this process: what load beside it changes least
        fam = {k: v for k, v in r.timings.items() if "." not in k}
        errors = [f.id for f in r.findings if f.severity.value in ("error", "warning")]
        goal = GOALS[bed]
        print(f"[{bed}] seed {seed}: every family ({', '.join(r.families)}) in {r.seconds:.1f} s "
              f"= {r.seconds / step:.0f} plain steps; goal {goal:.0f} s: {'within' if r.seconds <= goal else 'OVER'}; "
              f"errors and warnings on the clean pipeline: {errors or 'none'} · {load()}")
        print(f"[{bed}] seed {seed}: CPU {cpu:.1f} s of this process ({torch.get_num_threads()} torch threads: on an "
              f"idle machine the wall time is about the CPU time with 1 thread)")
        for name, secs in sorted(fam.items(), key=lambda kv: -kv[1]):
            print(f"    {name:14s} {secs:6.1f} s  {100 * secs / max(r.seconds, 1e-9):5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bed", default="reference", choices=("reference", "hf", "symbolic", "all"))
    ap.add_argument("--budget", default="business")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    for bed in ("reference", "hf", "symbolic") if args.bed == "all" else (args.bed,):
        bench(bed, args.budget, seeds)


if __name__ == "__main__":
    main()
