"""`bisect` over commits: golden runs against the number of commits, and the cost of one run.

    .venv/bin/python benchmarks/bench_bisect.py [--sizes 4 8 16 32 64]

Two measurements in one run, on real git repositories of a user-style pipeline (tests/bisect_repo.py):

1. Cost in golden runs for N commits, culprit at a few positions, against the budget
   ⌈log₂ N⌉ + 2 (DESIGN §7). The search, the worktree-free predicate and the comparisons are the
   real ones; only each commit's run is made in-process from `git show SHA:userpipe.py` (so that
   64 commits take seconds). One full bisect with real worktrees and worker processes (N = 16)
   checks that it makes the same number of runs.
2. The time of one golden run at a commit (worktree + worker process) against a plain in-process
   `compare` of the same pipeline (run_golden + compare_traces), as a ratio.
3. `bisect --checkpoints`: golden runs against the number of checkpoints N (a run whose `head`
   group's gradients are scaled ×1000 at one step, tests/checkpoint_run.py), and the time of one
   checkpoint probe (load, golden batch, one update) against a plain in-process `compare`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bisect_repo import SPEC, build_repo, capture_golden  # noqa: E402
from signalchain.experiments.bisect import _runner  # noqa: E402
from signalchain.experiments.bisect._runner import CommitRunner, RunResult  # noqa: E402
from signalchain.experiments.bisect.commits import bisect_commits  # noqa: E402
from signalchain.experiments.capture import run_golden  # noqa: E402
from signalchain.golden import compare_traces, load_golden  # noqa: E402


def _in_process(self: CommitRunner, sha: str) -> RunResult:
    """The commit's userpipe.py, imported from `git show` and run here (no worktree, no process)."""
    self.runs += 1
    text = subprocess.run(["git", "-C", str(self.root), "show", f"{sha}:userpipe.py"], capture_output=True,
                          text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"userpipe_{sha[:12]}", loader=None)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    exec(compile(text, "userpipe.py", "exec"), module.__dict__)
    return RunResult(run_golden(module.UserPipe(), self.seed).trace)


def runs_against_size(sizes: list[int], base: Path) -> None:
    real_run = CommitRunner.run
    CommitRunner.run = _in_process  # type: ignore[method-assign]
    try:
        print(f"{'N commits':>9s} {'culprit':>8s} {'runs':>5s} {'⌈log₂N⌉+2':>10s}  within")
        for n in sizes:
            repo = base / f"r{n}"
            for culprit in sorted({2, n // 2 + 1, n}):
                shas = build_repo(repo / str(culprit), n, bug_at=culprit)
                golden = load_golden(capture_golden(repo / str(culprit), shas[0], repo / f"g{culprit}"))
                o = bisect_commits(golden, repo / str(culprit), shas[0], shas[-1], SPEC, seed=0, cache=None)
                assert o.first_bad and o.first_bad["sha"] == shas[culprit - 1], (n, culprit, o.status)
                budget = math.ceil(math.log2(n)) + 2
                print(f"{n:9d} {culprit:8d} {o.runs:5d} {budget:10d}  {'yes' if o.runs <= budget else 'NO'}")
    finally:
        CommitRunner.run = real_run  # type: ignore[method-assign]


def one_run_against_compare(base: Path, repeat: int = 3) -> None:
    repo = base / "timing"
    shas = build_repo(repo, 16, bug_at=11)
    golden = load_golden(capture_golden(repo, shas[0], base / "g-timing"))
    t0 = time.perf_counter()
    o = bisect_commits(golden, repo, shas[0], shas[-1], SPEC, seed=0, cache=None)
    full = time.perf_counter() - t0
    print(f"\nreal bisect over 16 commits (worktrees + worker processes): {o.runs} golden runs, {full:.1f} s, "
          f"culprit {'found' if o.first_bad and o.first_bad['sha'] == shas[10] else 'MISSED'}")
    runner = CommitRunner(repo, SPEC, 0, cache=None, timeout=600)
    at_commit = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        assert runner.run(shas[5]).trace is not None
        at_commit.append(time.perf_counter() - t0)
    spec = importlib.util.spec_from_file_location("userpipe_plain", repo / "userpipe.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    plain = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        compare_traces(golden.trace, run_golden(module.UserPipe(), 0).trace)
        plain.append(time.perf_counter() - t0)
    command = []
    cli = [sys.executable, "-c", "from signalchain.cli import main; main()", "compare", str(golden.path),
           "--pipeline", SPEC]
    for _ in range(repeat):
        t0 = time.perf_counter()
        rc = subprocess.run(cli, cwd=repo, capture_output=True, env=_runner.worker_env(repo)).returncode
        assert rc in (0, 1), rc  # 1: HEAD has the crop bug, so the comparison diverges
        command.append(time.perf_counter() - t0)
    a, b, c = statistics.median(at_commit), statistics.median(plain), statistics.median(command)
    print(f"one golden run at a commit (worktree + worker process): {a:.2f} s (median of {repeat})")
    print(f"`signalchain compare` of the same pipeline (a process):  {c:.2f} s  → ratio {a / c:.2f} ×")
    print(f"plain in-process compare (torch already imported):       {b:.3f} s → ratio {a / b:.0f} ×")
    print("the process start (importing torch and signalchain) dominates a run; the cache runs a commit once")


def checkpoints_against_size(sizes: list[int], base: Path) -> None:
    from checkpoint_run import TwoGroupPipeline, train
    from signalchain.experiments.bisect._checkpoint_files import find_checkpoints
    from signalchain.experiments.bisect.checkpoints import bisect_checkpoints

    pipe = TwoGroupPipeline()
    golden = run_golden(pipe, 0).trace
    loss = float(golden["loss"].summary["value"])
    print(f"\n{'N ckpts':>9s} {'spike at':>8s} {'runs':>5s} {'⌈log₂N⌉+2':>10s}  named")
    probe_seconds: list[float] = []
    for n in sizes:
        for k in sorted({n // 4, n // 2, (3 * n) // 4}):
            folder = base / f"ckpt-{n}-{k}"
            train(folder, steps=n, spike_at=k)
            res = bisect_checkpoints(pipe, find_checkpoints(str(folder)), seed=0, golden=golden, golden_loss=loss)
            named = res.checkpoints[res.first_unhealthy] if res.first_unhealthy is not None else "—"
            budget = math.ceil(math.log2(n)) + 2
            ok = "yes" if res.runs <= budget and named == f"ckpt-{k:03d}.pt" else "NO"
            print(f"{n:9d} {k:8d} {res.runs:5d} {budget:10d}  {named} {ok}")
            probe_seconds += [p.seconds for p in res.probes if p.loaded]
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        compare_traces(golden, run_golden(pipe, 0).trace)
        t.append(time.perf_counter() - t0)
    a, b = statistics.median(probe_seconds), statistics.median(t)
    print(f"one checkpoint probe (load + golden batch + one update): {a * 1e3:.1f} ms (median of {len(probe_seconds)})")
    print(f"plain in-process compare of the same pipeline:           {b * 1e3:.1f} ms → ratio {a / b:.2f} ×")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        runs_against_size(args.sizes, Path(tmp))
        one_run_against_compare(Path(tmp))
        checkpoints_against_size([8, 16, 20, 32, 64], Path(tmp))


if __name__ == "__main__":
    main()
