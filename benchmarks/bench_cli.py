"""What the command line costs to start, measured in one run (issue 26 item 4):

    .venv/bin/python benchmarks/bench_cli.py [--rounds 5]

Each variant is a fresh process, run round by round in alternation (so that a busy machine slows
all of them alike); a first round warms the disk cache and is dropped:
  pass            python -c pass                       (the interpreter alone)
  import torch    python -c "import torch"             (what any torch-based tool pays first)
  --help          signalchain --help
  --version       signalchain --version
  listen 4 s      signalchain listen one_4s.wav --json -   (one 4 s, 32 kHz mono WAV)
  audit 8 clips   signalchain audit clips/ --no-cache      (8 WAVs of 2 s in one folder)
Printed: the median wall time of each, its ratio to `pass` and to `import torch`, the median CPU
time (user + system: what a busy machine does not stretch), and the goals (--help and --version
≤ 0.3 s, listen of one short file ≤ 2 s). `signalchain` is run as the
console script does (`from signalchain.cli import main; main()`) by this interpreter, so the
package on its path (PYTHONPATH=src for a work tree) is the one measured.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 32000
ENTRY = "from signalchain.cli import main; main()"
GOALS = {"--help": 0.3, "--version": 0.3, "listen 4 s": 2.0}


def make_inputs(tmp: Path) -> tuple[Path, Path]:
    """One 4 s WAV, and a folder of 8 different 2 s WAVs."""
    rng = np.random.default_rng(0)
    t = np.arange(4 * SR) / SR
    one = tmp / "one_4s.wav"
    sf.write(one, 0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.standard_normal(t.size), SR)
    clips = tmp / "clips"
    clips.mkdir()
    for i in range(8):
        f0 = 110 * 2 ** (i / 5)
        x = 0.25 * np.sin(2 * np.pi * f0 * t[: 2 * SR]) * np.exp(-t[: 2 * SR] * (1 + i % 3))
        sf.write(clips / f"clip{i}.wav", x + 0.005 * rng.standard_normal(x.size), SR)
    return one, clips


def variants(one: Path, clips: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "pass": [py, "-c", "pass"],
        "import torch": [py, "-c", "import torch"],
        "--help": [py, "-c", ENTRY, "--help"],
        "--version": [py, "-c", ENTRY, "--version"],
        "listen 4 s": [py, "-c", ENTRY, "listen", str(one), "--json", "-"],
        "audit 8 clips": [py, "-c", ENTRY, "audit", str(clips), "--no-cache"],
    }


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the child and its children) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:]) or argv[-1]}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    with tempfile.TemporaryDirectory() as tmp:
        runs = variants(*make_inputs(Path(tmp)))
        times: dict[str, list[float]] = {v: [] for v in runs}
        cpu: dict[str, list[float]] = {v: [] for v in runs}
        for r in range(a.rounds + 1):  # round 0 warms the disk cache and the byte-code caches: dropped
            for name, argv in runs.items():
                took, used = timed(argv, env)
                if r:
                    times[name].append(took)
                    cpu[name].append(used)
    med = {v: statistics.median(ts) for v, ts in times.items()}
    med_cpu = {v: statistics.median(ts) for v, ts in cpu.items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"signalchain start-up: {a.rounds} alternating rounds (first dropped), medians of a fresh process; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f}")
    print(f"  {'':14s} {'wall':>8s}  {'× pass':>8s}  {'× import torch':>14s}  {'CPU':>8s}  {'× torch':>7s}  "
          "goal (wall)")
    for v, m in med.items():
        goal = GOALS.get(v)
        verdict = "" if goal is None else f"≤ {goal:g} s: {'met' if m <= goal else 'NOT met'}"
        c = med_cpu[v]
        print(f"  {v:14s} {m:7.3f}s  {m / med['pass']:7.1f}×  {m / med['import torch']:13.2f}×  {c:7.3f}s  "
              f"{c / med_cpu['import torch']:6.2f}×  {verdict}")
    spread = {v: (min(ts), max(ts)) for v, ts in times.items()}
    print("  wall range (min–max): " + ", ".join(f"{v} {lo:.2f}–{hi:.2f} s" for v, (lo, hi) in spread.items()))
    print("  (on a busy machine the wall times stretch; CPU time is what the process itself used)")


if __name__ == "__main__":
    main()
