"""The catalogue's job order: the longest runs (every family) first, every job exactly once."""

from __future__ import annotations

from signalchain.experiments.scoring import FaultRow, job_order


def _row(name: str, symptom: str | None) -> FaultRow:
    return FaultRow(name=name, family="g", cause="", expected_ids=["x"], expected_stage="s", symptom=symptom)


def test_control_then_symptomless_faults_then_the_rest_each_once():
    rows = [_row("a", "nan"), _row("b", None), _row("c", "silent"), _row("d", None)]
    order = job_order(rows, [0, 1])
    assert [(k, i if k == "control" else i.name) for k, i, _, _ in order] == [
        ("control", 0), ("control", 1), ("fault", "b"), ("fault", "d"), ("fault", "a"), ("fault", "c")]
    assert [seed for k, _, seed, _ in order] == [0, 1, 0, 0, 0, 0]  # faults at seed 0, controls at theirs
    assert {i.name: s for k, i, _, s in order if k == "fault"} == {"a": "nan", "b": None, "c": "silent", "d": None}


def test_without_symptoms_every_fault_runs_every_family_in_catalogue_order():
    rows = [_row("a", "nan"), _row("b", None)]
    order = job_order(rows, [3], by_symptom=False)
    assert [(k, s) for k, _, _, s in order] == [("control", None), ("fault", None), ("fault", None)]
    assert [i.name for k, i, _, _ in order if k == "fault"] == ["a", "b"]
