"""Fixtures of the audit tests: the planted and the clean dataset (see audit_datasets.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from audit_datasets import build_clean, build_conventions, build_planted  # noqa: E402


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_planted(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="session")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_clean(tmp_path_factory.mktemp("clean"))


@pytest.fixture(scope="session")
def conventions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_conventions(tmp_path_factory.mktemp("conventions"))
