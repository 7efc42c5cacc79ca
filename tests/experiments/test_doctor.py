"""The doctor end to end on the reference pipeline."""

import pytest

from signalchain import UsageError
from signalchain.experiments.doctor import SYMPTOMS, run_doctor, select_families
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_reference_raises_no_error(seed):
    r = run_doctor(ProtocolView(ReferencePipeline(RefConfig(batch_size=6))), seed=seed, budget="economy")
    errors = [(f.id, f.stage, f.message) for f in r.findings if f.severity.value == "error"]
    assert errors == []
    assert {"audio", "data", "optimisation"} <= set(r.families)
    assert r.metrics["overfit"]["series"]["loss on the golden batch"][1]
    assert r.metrics["lr_sweep"]["series"]["loss after a few steps from the same start"][0]


def test_symptoms_select_families_and_unknown_names_are_refused():
    run, missing = select_families(symptom="flat-loss")
    assert run == ["data", "optimisation", "precision"] and missing == []
    run, missing = select_families(symptom="nan")
    assert "numerics" in missing or "numerics" in run
    assert set(SYMPTOMS) == {"flat-loss", "unstable", "nan", "silent", "repetitive", "ignores-caption",
                             "too-good-validation", "slow"}
    with pytest.raises(UsageError, match="unknown symptom 'flat'"):
        select_families(symptom="flat")
    with pytest.raises(UsageError, match="unknown family 'optimization'"):
        select_families(["optimization"])


def test_detectors_see_the_same_through_a_protocol_view():
    """DESIGN §6: findings come from what the pipeline shows, never from its fault configuration."""
    raw = ReferencePipeline(RefConfig(batch_size=4), faults=["mask_all_padding"])
    direct = run_doctor(raw, families=["data"], budget="economy")
    viewed = run_doctor(ProtocolView(raw), families=["data"], budget="economy")
    assert [(f.id, f.stage, f.message) for f in direct.findings] == [
        (f.id, f.stage, f.message) for f in viewed.findings
    ]
    assert any(f.id == "mask.empty" for f in viewed.findings)
    with pytest.raises(AttributeError):
        _ = ProtocolView(raw).config


def test_a_crashing_pipeline_becomes_a_finding():
    class Broken(ReferencePipeline):
        def step(self, model, batch, tap=None):
            raise RuntimeError("shape mismatch in my step")

    r = run_doctor(Broken(RefConfig(batch_size=4)), families=["data"], budget="economy")
    assert r.findings[0].id == "pipeline.step_failed" and "shape mismatch in my step" in r.findings[0].message
    assert "test_doctor.py" in r.findings[0].message
