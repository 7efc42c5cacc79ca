"""`assert_matches_golden`: the golden batch as a regression test, for pytest or any runner (README:
"The golden batch in your CI").

It runs the pipeline's golden batch and compares it with the golden on disk, each stage with the
tolerance of its dtype (`golden/tolerances.py`) unless told otherwise; a mismatch is an
`AssertionError` naming the first divergent stage and its numbers. A golden is only ever written on
purpose (`update=True`, or pytest's `--signalchain-update`); a missing one fails and says how to make it.

Cheap to import: torch, numpy and the golden machinery are imported when a check runs, because the
pytest plugin that imports this module is loaded in every pytest session of a user.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GoldenSession", "GoldenChecker", "assert_matches_golden", "current_session", "open_session",
           "close_session"]

DEFAULT_MARGIN = 10.0


@dataclass
class GoldenSession:
    """What a pytest session asked for: refresh goldens, how many runs to suggest tolerances from,
    where relative golden paths start, and the notes of what was written (for the summary)."""

    update: bool = False
    suggest: int | None = None
    root: Path | None = None
    notes: list[str] = field(default_factory=list)


_SESSIONS: list[GoldenSession] = []  # a stack: pytester runs a session inside a session


def current_session() -> GoldenSession | None:
    """The innermost pytest session's settings, or None outside pytest."""
    return _SESSIONS[-1] if _SESSIONS else None


def open_session(session: GoldenSession) -> None:
    _SESSIONS.append(session)


def close_session(session: GoldenSession) -> None:
    if session in _SESSIONS:
        _SESSIONS.remove(session)


def _test_name() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def _resolve(path: str | os.PathLike[str], session: GoldenSession | None) -> Path:
    folder = Path(path)
    if not folder.is_absolute() and session is not None and session.root is not None:
        folder = session.root / folder  # the same golden whichever folder pytest was started from
    return folder


def _pipeline(pipeline: Any) -> tuple[Any, str | None]:
    if isinstance(pipeline, str):
        from ..pipeline import load_pipeline

        return load_pipeline(pipeline), pipeline
    return pipeline, None


def _load(folder: Path, in_pytest: bool, name: str, seed: int) -> Any:
    __tracebackhide__ = True
    from .._atomic import previous_dir
    from ..errors import GoldenFileError
    from ..golden import load_golden
    from ._golden_message import update_hint

    if not os.path.lexists(folder) and not os.path.lexists(previous_dir(folder)):
        raise AssertionError(f"no golden batch at {folder} (pipeline {name!r}, seed {seed}); goldens are never "
                             f"created silently. Create it on purpose: {update_hint(in_pytest)}")
    try:
        return load_golden(folder)
    except GoldenFileError as exc:
        raise AssertionError(f"the golden batch at {folder} cannot be used: {exc}\nIf it is stale rather than "
                             f"tampered with, re-capture it: {update_hint(in_pytest)}") from None


def _check(pipe: Any, spec: str | None, folder: Path, seed: int, tol: Any, per_stage: Any, in_pytest: bool) -> Any:
    __tracebackhide__ = True
    from ..errors import GoldenFileError
    from ..experiments.capture import run_golden
    from ..golden import Tolerance, compare_traces, read_tolerances, resolve_tolerances
    from ._golden_message import failure_message, update_hint

    name = getattr(pipe, "name", spec or type(pipe).__name__)
    golden = _load(folder, in_pytest, name, seed)
    captured = (golden.provenance or {}).get("seed")
    if isinstance(captured, int) and captured != seed:
        raise AssertionError(f"the golden batch at {folder} was captured with seed {captured}, this test runs "
                             f"seed {seed}; pass seed={captured}, or re-capture: {update_hint(in_pytest)}")
    try:
        suggested = read_tolerances(golden.path, golden.trace)
    except GoldenFileError as exc:
        raise AssertionError(str(exc)) from None
    resolved = resolve_tolerances(golden.trace, per_stage, default=tol, suggested=suggested)
    run = run_golden(pipe, seed)
    comparison = compare_traces(golden.trace, run.trace, Tolerance(),
                                per_stage={stage: t for stage, (t, _src) in resolved.items()})
    if not comparison.identical:
        raise AssertionError(failure_message(comparison, golden, resolved, pipeline=name, in_pytest=in_pytest,
                                             folder=folder))
    return comparison


def _update(pipe: Any, spec: str | None, folder: Path, seed: int, suggest: int | None, margin: float,
            tol: Any, per_stage: Any) -> str:
    """Capture and write the golden (and suggested tolerances); return the note of what was written."""
    from .._atomic import write_text_atomic
    from ..errors import GoldenFileError, UsageError
    from ..experiments.capture import run_golden
    from ..golden import (
        TOLERANCES,
        check_target,
        collect_provenance,
        compare_traces,
        load_golden,
        read_tolerances,
        resolve_tolerances,
        save_golden,
        stage_tolerances,
        suggest_tolerances,
        write_tolerances,
    )

    check_target(folder)  # refuse, before the run, a folder that is not a golden
    previous, kept, kept_text = None, None, None
    try:
        previous = load_golden(folder)
        kept = read_tolerances(previous.path, previous.trace)
        kept_text = (previous.path / TOLERANCES).read_text(encoding="utf-8") if kept else None
    except (GoldenFileError, OSError):
        pass  # no previous golden (or tolerances) worth comparing with or keeping: it is being replaced
    run = run_golden(pipe, seed)
    defaults = stage_tolerances(run.trace)
    resolve_tolerances(run.trace, per_stage, default=tol)  # a typo in an override shows now, not at the next run
    suggested = None
    if suggest:
        traces = [run.trace] + [run_golden(pipe, seed).trace for _ in range(suggest - 1)]
        suggested = suggest_tolerances(traces, margin)
    save_golden(folder, run.trace, collect_provenance(pipe, spec=spec, seed=seed))
    parts = [f"wrote golden {folder} ({len(run.trace)} stages, seed {seed})"]
    if previous is not None:
        was = stage_tolerances(previous.trace, suggested=kept)
        first = compare_traces(previous.trace, run.trace, per_stage=was).first_divergence
        parts.append("same as the previous golden" if first is None
                     else f"the previous golden differed first at {first.stage!r}")
    if suggested is not None:
        write_tolerances(folder, suggested, runs=suggest or 0, margin=margin)
        loose = [s for s, t in suggested.items() if t != defaults[s]]
        parts.append(f"tolerances.json from {suggest} runs: " + (f"above the dtype default at {', '.join(loose)}"
                                                                 if loose else "every stage at its dtype default"))
    elif kept and kept_text is not None:
        try:
            resolve_tolerances(run.trace, suggested=kept)
        except UsageError:
            parts.append("dropped the previous tolerances.json (its stages no longer fit this golden)")
        else:
            write_text_atomic(folder / TOLERANCES, kept_text)
            parts.append("kept the previous tolerances.json")
    return "; ".join(parts)


def assert_matches_golden(pipeline: Any, path: str | os.PathLike[str], *, seed: int = 0, tol: Any = None,
                          per_stage: Any = None, update: bool | None = None, suggest: int | None = None,
                          margin: float = DEFAULT_MARGIN) -> Any:
    """Run `pipeline`'s golden batch for `seed` and assert it matches the golden at `path`.

    `pipeline`: a pipeline object or a spec (`package.module:attr`, `path/to/file.py:attr`).
    `path`: the golden folder; relative paths start at pytest's rootdir under pytest, else at the
    current folder. `tol`: one `Tolerance` (or `(rtol, atol)`) for every float stage instead of
    the dtype defaults; `per_stage`: `{stage: Tolerance or (rtol, atol)}`, which win over
    everything, then a `tolerances.json` in the golden folder, then `tol`, then the dtype default.
    `update`: capture and write the golden instead of comparing (default: pytest's
    `--signalchain-update`); `suggest`: with `update`, run `suggest` times and store the suggested
    tolerances (`margin` × the largest deviation seen, never below the default) as `tolerances.json`.

    Returns the `Comparison` when it compared, None when it wrote the golden.
    """
    __tracebackhide__ = True
    session = current_session()
    if update is None:
        update = session.update if session is not None else False
    if suggest is None and update and session is not None:
        suggest = session.suggest
    if suggest is not None and (isinstance(suggest, bool) or not isinstance(suggest, int) or suggest < 2):
        from ..errors import UsageError

        raise UsageError(f"suggest={suggest!r}: give the number of runs to measure, an integer >= 2")
    folder = _resolve(path, session)
    pipe, spec = _pipeline(pipeline)
    if not update:
        return _check(pipe, spec, folder, seed, tol, per_stage, in_pytest=session is not None)
    note = _update(pipe, spec, folder, seed, suggest, margin, tol, per_stage)
    if session is not None:
        test = _test_name()
        session.notes.append(f"{test}: {note}" if test else note)
    return None


class GoldenChecker:
    """`assert_matches_golden` bound to a session's `--signalchain-update` (what the fixture hands a test)."""

    def __init__(self, update: bool = False, suggest: int | None = None):
        self.update = update
        self.suggest = suggest

    def __call__(self, pipeline: Any, path: str | os.PathLike[str], *, seed: int = 0, tol: Any = None,
                 per_stage: Any = None, margin: float = DEFAULT_MARGIN) -> Any:
        __tracebackhide__ = True
        return assert_matches_golden(pipeline, path, seed=seed, tol=tol, per_stage=per_stage, update=self.update,
                                     suggest=self.suggest if self.update else None, margin=margin)

    def __repr__(self) -> str:
        return f"GoldenChecker(update={self.update}, suggest={self.suggest})"
