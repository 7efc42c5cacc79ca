"""One golden run at one commit, in its own process: `python _worker.py --spec S --seed N --out DIR`.

`commits.py` starts it by file path, with the probed commit's worktree as the current folder and
that worktree first on `PYTHONPATH` (then the folder the running signalchain lives in), so the
pipeline is imported as that commit has it. It loads the pipeline spec (a relative file path
resolves against the worktree), records `run_golden(pipe, seed)` and saves it as a golden batch
in DIR. When the code cannot be imported or run, it exits non-zero and its last stderr line is
`signalchain-bisect-worker: <why>`: the parent turns that line into the skip's reason.

Exit status: 0 saved; 3 the pipeline (or signalchain) cannot be imported; 4 the step failed;
5 the trace could not be saved.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

PREFIX = "signalchain-bisect-worker: "
IMPORT_FAILED, RUN_FAILED, SAVE_FAILED = 3, 4, 5


def _fail(code: int, what: str, exc: BaseException) -> None:
    text = " | ".join(ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip())
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    if isinstance(exc, SystemExit):
        text = f"the code called sys.exit({exc.code!r})"
    sys.stderr.write(f"\n{PREFIX}{what}: {text[:500]}{where}\n")
    sys.stderr.flush()
    os._exit(code)  # no atexit hook of the user's code may turn a failure into a success


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="signalchain-bisect-worker")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        from signalchain.experiments.capture import run_golden
        from signalchain.golden import collect_provenance, save_golden
        from signalchain.pipeline import load_pipeline
    except BaseException as exc:
        _fail(IMPORT_FAILED, "cannot import signalchain", exc)
    try:
        pipe = load_pipeline(args.spec)
    except BaseException as exc:
        _fail(IMPORT_FAILED, f"cannot load pipeline {args.spec}", exc)
    try:
        run = run_golden(pipe, args.seed)
    except BaseException as exc:
        _fail(RUN_FAILED, "the golden step failed", exc)
    try:
        prov = collect_provenance(pipe, spec=args.spec, seed=args.seed)
        save_golden(args.out, run.trace, prov, write_wavs=False)
    except BaseException as exc:
        _fail(SAVE_FAILED, "the trace could not be saved", exc)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # Run by path, Python puts this file's folder first on sys.path; it must not shadow the user's modules.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main()
