"""The profile by stage on a busy machine against the same profile idle (issue 40 item 4).

    .venv/bin/python benchmarks/bench_busy_profile.py [--seeds 0,1,2] [--busy 2]

Runs the doctor's profiled replay (`measure_profile`, the budget's profiled steps) of the reference
pipeline per seed, first idle, then with `--busy` processes beside it that each spin one BLAS
thread on matrix products (what a shared node's neighbours do). Prints each stage's share of the
step, idle and busy (mean over seeds), and the largest difference in percentage points against the
goal of 10. Then, still busy, runs `signalchain doctor reference --fault slow_clip_reads` with
`--family performance` and with `--symptom slow`, and says whether `perf.data_bound` is named.
Each seed's line says the thread count of the replay the doctor kept (`measure_profile` runs it again
on one intra-op thread where the first replay's pool threads queued; the second replay finds the
loader's clips and the codes cached by the first, as a full doctor's profile does after the other
families). The load average is printed beside each phase: the figures mean something only with it. The clip
cache is emptied before each profile, so neither phase reads clips the other rendered.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from signalchain.experiments.context import Context
from signalchain.experiments.profile import measure_profile
from signalchain.reference import ReferencePipeline
from signalchain.reference.data import _RENDERED

GOAL_POINTS = 10.0
SPIN = "import numpy as np\na = np.random.rand(512, 512)\nwhile True:\n    a = (a @ a) / 512.0\n"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextmanager
def busy(n: int):
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], env={**os.environ, **ONE_THREAD}) for _ in range(n)]
    try:
        time.sleep(5.0)  # let the load average see them
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def shares(seeds: list[int]) -> tuple[dict[str, float], list[float]]:
    per: dict[str, list[float]] = {}
    queued = []
    runs = []
    for seed in seeds:
        _RENDERED.clear()  # each phase renders its clips afresh, as a doctor in a new process does
        rep = measure_profile(Context(pipeline=ReferencePipeline(), seed=seed))
        for s in rep.stages:
            per.setdefault(s.stage, []).append(s.share)
        if rep.wall_ms and rep.queued_ms:
            queued.append(sum(rep.queued_ms) / max(sum(rep.wall_ms), 1e-9))
        first = f", first replay's pool queued {rep.pool_queued_share:.0%}" if rep.pool_queued_share is not None else ""
        runs.append(f"seed {seed}: {rep.threads} thread(s){first}")
    print("  " + "; ".join(runs))
    return {k: statistics.fmean(v) for k, v in per.items()}, queued


def doctor_names_data_bound(selector: list[str]) -> tuple[bool, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cli = str(Path(sys.executable).with_name("signalchain"))
        cmd = [cli, "doctor", "reference", "--fault", "slow_clip_reads", *selector, "-q", "--json", str(out)]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
        found = json.loads(out.read_text()).get("findings", []) if out.exists() else []
    said = sorted({f"{f['id']} ({f['severity']})" for f in found if f["severity"] in ("warning", "error")})
    return any(f["id"] == "perf.data_bound" for f in found), said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the run, one BLAS thread each")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"idle: load {os.getloadavg()[0]:.2f}")
    idle, idle_q = shares(seeds)
    with busy(args.busy):
        print(f"busy ({args.busy} processes): load {os.getloadavg()[0]:.2f}")
        loaded, busy_q = shares(seeds)
        faults = {tuple(sel): doctor_names_data_bound(sel) for sel in (["--family", "performance"],
                                                                      ["--symptom", "slow"])}
        print(f"end of the busy phase: load {os.getloadavg()[0]:.2f}")
    print(f"step thread queued (share of wall): idle {[round(q, 2) for q in idle_q]}, "
          f"busy {[round(q, 2) for q in busy_q]}")
    print(f"{'stage':<24}{'idle %':>8}{'busy %':>8}{'points':>8}")
    worst = 0.0
    for stage in sorted(set(idle) | set(loaded), key=lambda k: -idle.get(k, 0.0)):
        a, b = 100 * idle.get(stage, 0.0), 100 * loaded.get(stage, 0.0)
        worst = max(worst, abs(a - b))
        print(f"{stage:<24}{a:>8.1f}{b:>8.1f}{b - a:>+8.1f}")
    print(f"largest difference: {worst:.1f} points, goal {GOAL_POINTS:.0f}: "
          f"{'ok' if worst <= GOAL_POINTS else 'OVER'}")
    for sel, (named, said) in faults.items():
        print(f"busy, slow_clip_reads, doctor {' '.join(sel)}: perf.data_bound "
              f"{'named' if named else 'MISSED'}; said {', '.join(said) or 'nothing'}")


if __name__ == "__main__":
    main()
