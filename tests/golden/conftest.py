"""Fixtures of the golden tests (helpers in golden_helpers.py, importable from these tests)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import golden_helpers as h  # noqa: E402

from signalchain import save_golden  # noqa: E402


@pytest.fixture
def forge():
    def write(folder, manifest, reseal=True):
        h.write_manifest(folder, manifest, reseal)

    return SimpleNamespace(reseal=h.reseal, read=h.read_manifest, write=write, file_sha=h.file_sha,
                           refresh_file=h.refresh_file)


@pytest.fixture
def tiny(tmp_path):
    """(folder, trace) of a saved tiny golden."""
    trace = h.tiny_trace()
    path = save_golden(tmp_path / "tiny", trace, {"seed": 0, "pipeline": "tiny", "pipeline_spec": None})
    return path, trace
