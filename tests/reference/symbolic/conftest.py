"""Fixtures of the symbolic bed's tests: the bed is built once per module (the pieces once per process)."""

from __future__ import annotations

import pytest

pytest.importorskip("miditok")
pytest.importorskip("music21")


@pytest.fixture(scope="module")
def bed():
    import torch

    from signalchain.reference.symbolic import SymbolicBedPipeline

    torch.set_num_threads(1)
    return SymbolicBedPipeline()


@pytest.fixture(scope="module")
def golden(bed):
    return bed.golden_batch(0)
