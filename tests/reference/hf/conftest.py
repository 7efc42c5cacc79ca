"""Fixtures of the HF bed's fault tests: the bed is built once per module (the clips once per process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def bed():
    import torch

    from signalchain.reference.hf import HFBedPipeline

    torch.set_num_threads(1)
    return HFBedPipeline()


@pytest.fixture(scope="module")
def golden(bed):
    return bed.golden_batch(0)
