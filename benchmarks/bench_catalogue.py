"""`signalchain faults` on a bed's catalogue (or a sample of it): wall time and CPU time of the workers.

    .venv/bin/python benchmarks/bench_catalogue.py [--bed reference] [--workers 2] [--sample N] [--seeds 0,1,2,3,4]

`--sample N`: the first fault of each (group, symptom) pair, then more in catalogue order up to N
(0: the whole catalogue). CPU seconds are the workers' own (`RUSAGE_CHILDREN`), which load beside the
run changes far less than the wall time; the machine's load average is printed beside both. The
score (detected, localised, clean-control errors) is printed too: a faster catalogue must score the same.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from signalchain.cli._common import BUILTIN_PIPELINES
from signalchain.experiments.scoring import score_catalogue
from signalchain.pipeline import load_pipeline


def sample(catalogue: list[dict], n: int) -> list[dict]:
    if n <= 0 or n >= len(catalogue):
        return catalogue
    seen, first, rest = set(), [], []
    for f in catalogue:
        key = (f["family"], f.get("symptom"))
        (rest if key in seen else first).append(f)
        seen.add(key)
    return (first + rest)[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bed", default="reference", help="a pipeline spec: reference, hf-bed, symbolic-bed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--budget", default="business")
    args = ap.parse_args()
    spec = BUILTIN_PIPELINES.get(args.bed, args.bed)
    faults = sample(load_pipeline(spec).fault_catalogue(), args.sample)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    score = score_catalogue(spec, faults, seeds, args.workers, args.budget)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    s = score.to_dict()["summary"]
    print(f"{args.bed}: {len(faults)} faults + {len(seeds)} clean seeds, {args.workers} workers: wall {wall:.0f} s, "
          f"workers' CPU {cpu:.0f} s · detected {s['detected']}/{s['faults']}, "
          f"localised {s['localised']}/{s['faults']}, "
          f"clean-control errors {score.control_errors} · load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
