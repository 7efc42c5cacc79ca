"""`signalchain history`'s readers on a 10^6-point log in each format (issue 28: <= 5 s).

    .venv/bin/python benchmarks/bench_history_read.py [--points 1000000]

Writes, in a temporary folder, a run of `--points` logged values in each format with its real writer
or exact layout (TensorBoard through torch's `SummaryWriter`, a Lightning `metrics.csv`, an HF
`trainer_state.json` as `TrainerState.save_to_json` writes it), then times `signalchain.history.read`
on each (best of 2) and prints the points per second, then the time every history judge takes on
what was read. Writing is not timed.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from signalchain.checks.history import judge
from signalchain.history import read


def _values(n: int) -> list[float]:
    return [3.0 + 3.0 * math.exp(-4.0 * i / n) + 0.01 * math.sin(i) for i in range(n)]


def write_all(root: Path, points: int) -> dict[str, Path]:
    steps = points // 2  # two metrics a step: loss and learning rate
    vals = _values(steps)
    out = {}
    hf = root / "hf"
    hf.mkdir()
    hist = [{"epoch": i / 1000, "learning_rate": 1e-4, "loss": v, "step": i} for i, v in enumerate(vals)]
    # an HF entry also carries its epoch: count it as a point too, as the reader keeps it
    hist = hist[: points // 3]
    (hf / "trainer_state.json").write_text(
        json.dumps({"global_step": len(hist), "log_history": hist}, indent=2, sort_keys=True)
    )
    out["hf-trainer"] = hf
    lt = root / "lightning"
    lt.mkdir()
    with open(lt / "metrics.csv", "w") as fh:
        fh.write("epoch,lr-Adam,step,train_loss_step\n")
        for i, v in enumerate(vals[: points // 3]):
            fh.write(f"{i // 1000},0.0001,{i},{v!r}\n")
    out["lightning-csv"] = lt
    from torch.utils.tensorboard import SummaryWriter

    tb = root / "tb"
    w = SummaryWriter(str(tb), max_queue=10_000, flush_secs=600)
    for i, v in enumerate(vals):
        w.add_scalar("train/loss", v, i)
        w.add_scalar("train/lr", 1e-4, i)
    w.close()
    out["tensorboard"] = tb
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        runs = write_all(Path(tmp), args.points)
        print(f"wrote the logs in {time.perf_counter() - t:.1f} s (not timed below)")
        for fmt, path in runs.items():
            best, n = math.inf, 0
            for _ in range(2):
                t = time.perf_counter()
                run = read(path)
                best = min(best, time.perf_counter() - t)
                n = run.points()
            t = time.perf_counter()
            judge(run)
            judged = time.perf_counter() - t
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            print(
                f"{fmt:14s} {n:>9,d} points  {size / 2**20:6.1f} MiB  read in {best:5.2f} s  "
                f"{n / best:>10,.0f} points/s  goal 5 s for 10^6: {'within' if n / best >= 2e5 else 'OVER'}; "
                f"judged in {judged:.2f} s"
            )


if __name__ == "__main__":
    main()
