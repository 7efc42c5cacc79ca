"""Fixtures of the browser tests: one headless Chromium for the session, always quit."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _chromium import find_browser, launch  # noqa: E402


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    found = find_browser()
    if isinstance(found, str):
        pytest.skip(f"no browser for the report tests: {found}")
    driver = launch(*found)
    try:
        yield driver
    finally:
        driver.quit()
