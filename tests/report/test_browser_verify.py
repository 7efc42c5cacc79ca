"""The `verify` page as the CLI writes it, in headless Chromium: both sides' players decode, the
figures load, nothing outside the page is needed (the numerics family, one seed: a few seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _chromium import load
from click.testing import CliRunner

from signalchain.cli import cli

HELPERS = Path(__file__).parents[1] / "experiments" / "verify_pipelines.py"


@pytest.mark.slow
def test_verify_page_plays_both_sides(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "verify.html"
    res = CliRunner().invoke(cli, ["verify", "--before-fault", "kl_soft_targets_log_zero", "--after",
                                   f"{HELPERS}:masked_nan", "--family", "numerics", "--control", "none",
                                   "--seeds", "1", "--html", str(out)])
    assert res.exit_code == 1, res.output
    page = load(browser, out)
    assert page.title.startswith("signalchain verify · failure_persists"), page.title
    assert not page.problems(), "\n".join(page.problems())
    assert len(page.audio) >= 8, len(page.audio)  # the golden audio stages, before and after
    assert "Before and after, seed by seed" in page.text and "The three tests" in page.text
