"""Run the strangers' bed and print its table: script × seed → errors, internal.check_failed, warnings.

    python tests/strangers/run_bed.py                      # every script, seeds 0 1 2
    python tests/strangers/run_bed.py --seeds 0 --only own_loop --json bed.json

Exit status 1 when any run raised, erred or had an `internal.check_failed`, or warned outside its
script's `ALLOWED` list (the same rule as `test_strangers.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: `strangers`, `_rank_jobs`

from strangers import _bed  # noqa: E402
from strangers._bed import verdict  # noqa: E402
from strangers.scripts import SCRIPTS  # noqa: E402


def script(name: str):
    return importlib.import_module(f"strangers.scripts.{name}")


def run_one(name: str, seed: int, root: Path) -> _bed.Run:
    module = script(name)
    with contextlib.redirect_stdout(sys.stderr):  # the trainers print their logs: the table is stdout's
        return _bed.timed(name, seed, lambda: module.main(seed, _bed.out_dir(root, name, seed)))


def table(runs: list[_bed.Run]) -> str:
    rows = ["| script | seed | errors | check_failed | warnings | steps | s |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        warned = ", ".join(sorted({f["id"] for f in r.of("warning")})) or "—"
        errors = len(r.of("error")) + (1 if r.error else 0)
        rows.append(f"| {r.script} | {r.seed} | {errors} | {len(r.check_failed)} | {warned} | {r.steps} | "
                    f"{r.seconds:.1f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--only", nargs="+", choices=SCRIPTS, default=SCRIPTS)
    ap.add_argument("--json", type=Path, help="write every run (findings included) here")
    ap.add_argument("--out", type=Path, help="where the runs write (default: a temporary folder)")
    args = ap.parse_args(argv)
    logging.getLogger("signalchain").setLevel(logging.ERROR)  # the table says it; the log would repeat it
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        runs = [run_one(name, seed, root) for name in args.only for seed in args.seeds]
    print(table(runs))
    failed = 0
    for r in runs:
        for line in verdict(r, script(r.script).ALLOWED):
            failed += 1
            print(f"FAIL {r.script} seed {r.seed}: {line}")
        for f in r.of("warning"):
            print(f"warning {r.script} seed {r.seed}: {f['id']} @ {f['stage']}: {f['message']}")
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in runs], indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
