"""signalchain's pytest plugin (entry point `pytest11`): the golden batch as a regression test in CI.

    def test_pipeline_matches_golden(signalchain_golden):
        signalchain_golden(MyPipeline(), "tests/golden/my_pipeline", per_stage={"logits": (1e-4, 1e-5)})

    pytest --signalchain-update                         # write the goldens on purpose, then commit them
    pytest --signalchain-update --signalchain-suggest 5   # also store tolerances measured from 5 runs

Loaded in every pytest session of anyone who installs signalchain, so it imports nothing heavy
(torch, numpy and the golden machinery are imported when a test compares) and its hooks never
raise into a session that does not use it.
"""

from __future__ import annotations

from typing import Any

import pytest

from .golden_assert import GoldenChecker, GoldenSession, assert_matches_golden, close_session, open_session

__all__ = ["assert_matches_golden", "signalchain_golden"]

_SESSION_KEY = pytest.StashKey[GoldenSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("signalchain", "signalchain golden batch")
    group.addoption("--signalchain-update", action="store_true", default=False,
                    help="Re-capture the golden batches that assert_matches_golden / signalchain_golden compare "
                         "with, instead of comparing (review and commit them afterwards).")
    group.addoption("--signalchain-suggest", type=int, default=None, metavar="N",
                    help="With --signalchain-update: run each pipeline N times (N >= 2) and store the suggested "
                         "tolerances (largest deviation seen x a margin) as tolerances.json in the golden folder.")


def pytest_configure(config: pytest.Config) -> None:
    update = bool(config.getoption("--signalchain-update", default=False))
    suggest = config.getoption("--signalchain-suggest", default=None)
    if suggest is not None and not update:
        raise pytest.UsageError("--signalchain-suggest N needs --signalchain-update: tolerances are suggested when "
                                "the goldens are captured")
    if suggest is not None and suggest < 2:
        raise pytest.UsageError(f"--signalchain-suggest {suggest}: give the number of runs to measure, 2 or more")
    session = GoldenSession(update=update, suggest=suggest, root=config.rootpath)
    config.stash[_SESSION_KEY] = session
    open_session(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        close_session(session)


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or not session.update:
        return []
    extra = f", tolerances from {session.suggest} runs" if session.suggest else ""
    return [f"signalchain: re-capturing golden batches (--signalchain-update{extra})"]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or not session.notes:
        return
    terminalreporter.write_sep("-", "signalchain: golden batches written")
    for note in session.notes:
        terminalreporter.write_line(note)


@pytest.fixture
def signalchain_golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """`assert_matches_golden` bound to this session's `--signalchain-update` and `--signalchain-suggest`."""
    session = request.config.stash.get(_SESSION_KEY, None)
    if session is None:
        return GoldenChecker()
    return GoldenChecker(update=session.update, suggest=session.suggest)
