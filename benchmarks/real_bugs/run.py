"""Run the real-bug bed and print its table: each bug → found at the right stage / flagged only /
missed, its twin clean or not, each control clean or not, and whether the symptom check separates
the bug from its twin.

    .venv/bin/python benchmarks/real_bugs/run.py                 # every bug, seed 0, 2 workers
    .venv/bin/python benchmarks/real_bugs/run.py --only amp_clip_before_unscale --seeds 0 1 2
    .venv/bin/python benchmarks/real_bugs/run.py --fast --json bed.json

Exit status 1 when a twin or a control got an error (a false error), a control a misleading warning,
or a reproduction failed (a bed error, or a symptom check that does not separate bug and twin).
Misses do not fail the run: they are the table's point.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/: the `real_bugs` package

from real_bugs.bed import Outcome, module, run_job, score  # noqa: E402
from real_bugs.bugs import NAMES  # noqa: E402


def _init() -> None:
    sys.path.insert(0, str(HERE.parent))


def run(names: list[str], seeds: list[int], workers: int) -> list[Outcome]:
    jobs = [(n, fixed, s) for n in names for s in seeds
            for fixed in ((False,) if module(n).BUG.kind == "control" else (False, True))]
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")  # torch in forked workers is not safe
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init) as pool:
            results = list(pool.map(run_job, *zip(*jobs)))
    else:
        results = [run_job(*j) for j in jobs]
    by = {(r["name"], r["fixed"], r["seed"]): r for r in results}
    return [score(module(n).BUG, by[(n, False, s)], by.get((n, True, s))) for n in names for s in seeds]


def table(outcomes: list[Outcome]) -> str:
    rows = ["| bug | class | reporter's library · idiom | result (warnings and errors) | twin | symptom | s |",
            "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        b = o.bug
        got = f"**{o.result}**" + (f" ({', '.join(o.ids)})" if o.ids else "")
        twin = o.twin + (f" ({', '.join(o.twin_ids)})" if o.twin_ids else "")
        rows.append(f"| [{b.name}]({b.thread}) s{o.seed} | {b.cls} | {b.library} · {b.idiom} | {got} | {twin} | "
                    f"{o.symptom} | {o.seconds:.0f} |")
    return "\n".join(rows)


def summary(outcomes: list[Outcome]) -> str:
    bugs = [o for o in outcomes if o.bug.kind == "bug"]
    controls = [o for o in outcomes if o.bug.kind == "control"]
    n = len(bugs)

    def count(result: str) -> int:
        return sum(o.result == result for o in bugs)

    return (f"{n} bug runs: {count('found')} found at the right stage, {count('flagged')} flagged only, "
            f"{count('missed')} missed; twins without error {sum(o.twin == 'clean' for o in bugs)}/{n}; "
            f"controls clean {sum(o.result == 'clean' for o in controls)}/{len(controls)}; "
            f"reproduction problems {sum(bool(o.problems) for o in outcomes)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=NAMES, help="these bugs only")
    ap.add_argument("--fast", action="store_true", help="the subset `make test` runs")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write every outcome (findings included) here")
    args = ap.parse_args(argv)
    names = args.only or [n for n in NAMES if module(n).BUG.fast or not args.fast]
    t0 = time.perf_counter()
    outcomes = run(names, args.seeds, args.workers)
    print(table(outcomes))
    print()
    print(summary(outcomes) + f" · {time.perf_counter() - t0:.0f} s on {args.workers} workers")
    failed = 0
    for o in outcomes:
        for p in o.problems:
            failed += 1
            print(f"PROBLEM {o.name} seed {o.seed}: {p}")
        if o.twin == "ERROR" or o.result == "NOT CLEAN":
            failed += 1
            print(f"FALSE ALARM {o.name} seed {o.seed}: {o.twin_ids if o.twin == 'ERROR' else o.ids}")
    if args.json:
        args.json.write_text(json.dumps([o.to_dict() for o in outcomes], indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
