"""Every family stays silent on clean HF pipelines: the integration's bed and a hand-tapped user
pipeline (no integration code). A check that is right on the reference and wrong here is wrong.

The full control over seeds 0-4 is `signalchain faults hf-bed`'s; here one seed each keeps the suite
short, with the hand-tapped pipeline on a second seed. The performance family is left out: its
verdicts are timings of this machine (it has its own tests, on planted delays)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from signalchain.experiments.doctor import run_doctor  # noqa: E402
from signalchain.pipeline import ProtocolView  # noqa: E402

pytestmark = pytest.mark.slow

FAMILIES = ("audio", "data", "numerics", "optimisation", "precision", "conditioning", "generation", "output",
            "splits")


def _loud(findings):
    return [(f.id, f.stage, f.message) for f in findings if f.severity.value in ("error", "warning")]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_the_hf_bed_raises_no_error_and_no_warning() -> None:
    from signalchain.reference.hf import HFBedPipeline

    result = run_doctor(ProtocolView(HFBedPipeline()), FAMILIES, seed=0)
    assert _loud(result.findings) == []
    assert not [f for f in result.findings if f.id == "internal.check_failed"]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_hand_tapped_hf_pipeline_raises_no_error_and_no_warning(seed: int) -> None:
    from integrations.hf_user_pipeline import make_pipeline

    result = run_doctor(ProtocolView(make_pipeline()), FAMILIES, seed=seed)
    assert _loud(result.findings) == []
    assert not [f for f in result.findings if f.id == "internal.check_failed"]
