"""One side of a verification at one commit, in its own process (`verify_states.CommitState`).

`python _verify_worker.py --spec S --seed N --families a,b [--golden] --budget B --out FILE`,
started by file path with the commit's worktree as the current folder and first on `PYTHONPATH`
(as the bisect worker is), so the pipeline is that commit's code. It runs the doctor's families
on the pipeline (`PipelineState.evaluate`) and writes the findings and figure dicts as strict JSON
to FILE (the figures carry the doctor's step log under `verify.steps`: what each family judged,
without which the caller counts no control evidence). When the code cannot be imported or run,
it exits non-zero and its last stderr line is `signalchain-verify-worker: <why>`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

PREFIX = "signalchain-verify-worker: "


def _fail(what: str, exc: BaseException) -> None:
    text = " | ".join(ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip())
    sys.stderr.write(f"\n{PREFIX}{what}: {text[:500]}\n")
    sys.stderr.flush()
    os._exit(3)  # no atexit hook of the user's code may turn a failure into a success


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="signalchain-verify-worker")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--families", required=True)
    parser.add_argument("--budget", default="economy")
    parser.add_argument("--golden", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        from signalchain._atomic import write_text_atomic
        from signalchain.experiments.verify import PipelineState
        from signalchain.findings import jsonable
        from signalchain.pipeline import ProtocolView, load_pipeline
    except BaseException as exc:
        _fail("cannot import signalchain", exc)
    try:
        pipe = ProtocolView(load_pipeline(args.spec))
    except BaseException as exc:
        _fail(f"cannot load pipeline {args.spec}", exc)
    try:
        state = PipelineState(pipe, args.spec, args.budget)
        findings, metrics = state.evaluate(args.seed, [f for f in args.families.split(",") if f], args.golden)
        payload = {"findings": [f.to_dict() for f in findings], "metrics": jsonable(metrics)}
        write_text_atomic(args.out, json.dumps(payload, allow_nan=False))
    except BaseException as exc:
        _fail("the doctor could not run", exc)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    # Run by path, Python puts this file's folder first on sys.path; it must not shadow the user's modules.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main()
