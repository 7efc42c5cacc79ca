"""Every history judge is silent (no warning, no error) on clean runs in every convention, over seeds."""

from __future__ import annotations

import pytest

from _history_curves import CONVENTIONS, make_run
from signalchain.checks.history import judge


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_clean_run_raises_nothing(convention: str, seed: int) -> None:
    found = [f for f in judge(make_run(convention, seed)) if f.severity.value != "info"]
    assert found == [], [(f.id, f.message) for f in found]
