"""`signalchain.doctor`: a `DoctorReport` on a clean and a faulty family of the toy pipeline, the
command line's JSON schema, its page, and bad arguments as `UsageError`s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import signalchain as sc
from signalchain.findings import Severity

TOY = f"{Path(__file__).resolve().parents[1] / 'toy_pipeline.py'}:make"


@pytest.fixture(scope="module")
def flagged() -> sc.DoctorReport:
    from toy_pipeline import ToyPipeline

    # the toy's tokens quantise a steady level, so its targets are one code: the data family says so
    return sc.doctor(ToyPipeline(), families="data")


def test_a_faulty_family_is_not_ok_and_str_names_the_first_error(flagged: sc.DoctorReport) -> None:
    assert isinstance(flagged, sc.DoctorReport)
    assert flagged.families == ["data"]
    errors = [f for f in flagged.findings if f.severity is Severity.ERROR]
    assert errors and flagged.ok is False and flagged.errors == errors
    text = str(flagged)
    lines = text.splitlines()
    assert lines[0].startswith("doctor · toy · data — not ok:") and f"{len(errors)} error" in lines[0]
    first = errors[0]
    assert lines[1] == f"first error: {first.id} at {first.stage}: {first.message}"
    assert any(ch.isdigit() for ch in lines[1])  # the numbers, not only a name
    assert len(lines) <= 6 and "DoctorResult(" not in text and "Finding(" not in text
    assert repr(flagged).startswith("<DoctorReport doctor · toy · data: not ok")


def test_a_clean_family_is_ok(tmp_path: Path) -> None:
    said: list[str] = []
    report = sc.doctor(TOY, families=["audio"], progress=said.append)  # the toy's audio: clean sines at -10 dBFS
    assert "audio" in said  # each family is announced as it starts
    assert isinstance(report, sc.DoctorReport)
    assert report.ok and not report.errors
    assert report.pipeline == TOY and report.name == "toy"
    assert str(report).splitlines()[0].startswith("doctor · toy · audio — ok:")
    assert "first error" not in str(report)


def test_to_json_is_the_command_lines_report(flagged: sc.DoctorReport, cli_json) -> None:
    mine = json.loads(flagged.to_json())
    theirs = cli_json("doctor", TOY, "--family", "data")
    assert list(mine) == list(theirs)
    assert [f["id"] for f in mine["findings"]] == [f["id"] for f in theirs["findings"]]
    assert mine["families"] == theirs["families"] == ["data"]
    assert mine["findings"] == [f.to_dict() for f in flagged.findings]


def test_to_json_also_writes_a_file(flagged: sc.DoctorReport, tmp_path: Path) -> None:
    text = flagged.to_json(tmp_path / "r.json")
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == text


def test_to_html_writes_the_doctor_page(flagged: sc.DoctorReport, tmp_path: Path) -> None:
    path = flagged.to_html(tmp_path / "doctor.html")
    page = path.read_text(encoding="utf-8")
    assert "<title>signalchain doctor" in page
    assert flagged.errors[0].id in page


@pytest.mark.parametrize("kwargs, match", [
    (dict(families=["nonsense"]), "unknown family 'nonsense'; allowed: .*data"),
    (dict(symptom="loud"), "unknown symptom 'loud'; allowed: flat-loss"),
    (dict(budget="first-class"), "unknown budget 'first-class'; allowed: economy"),
    (dict(seed=-1), "seed -1 is not a seed"),
])
def test_bad_arguments_are_usage_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(sc.UsageError, match=match):
        sc.doctor(TOY, **kwargs)


def test_a_pipeline_that_is_not_one_is_refused() -> None:
    with pytest.raises(sc.PipelineError, match="is not a Pipeline: it lacks"):
        sc.doctor(object(), families="audio")
