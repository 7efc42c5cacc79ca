"""`signalchain.capture` and `signalchain.compare`: a golden of the toy pipeline, compared with the code
as it is and with a fault; `str(Comparison)`; the command line's JSON schema and page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import signalchain as sc

TOY = f"{Path(__file__).resolve().parents[1] / 'toy_pipeline.py'}:make"


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> sc.CaptureReport:
    return sc.capture(TOY, tmp_path_factory.mktemp("api") / "golden")


def test_capture_saves_a_golden(golden: sc.CaptureReport) -> None:
    assert isinstance(golden, sc.CaptureReport)
    assert (golden.path / "manifest.json").is_file()
    assert len(golden.trace) == len(sc.load_golden(golden.path).trace) > 0
    assert golden.ok and str(golden).splitlines()[-1] == f"saved {len(golden.trace)} stages to {golden.path}"


def test_compare_with_the_same_code_is_identical(golden: sc.CaptureReport) -> None:
    report = sc.compare(golden.path, TOY)
    assert isinstance(report, sc.CompareReport)
    assert report.ok and report.identical and report.first_divergence is None and not report.findings
    assert f"identical: all {len(golden.trace)} stages match" in str(report)
    assert report.pipeline["source"] == "the pipeline argument"


def test_compare_with_a_fault_names_the_first_divergence(golden: sc.CaptureReport) -> None:
    from toy_pipeline import ToyPipeline

    report = sc.compare(golden.path, ToyPipeline("crop"))  # the crop moved by 40 samples
    assert not report.ok and not report.identical
    assert report.first_divergence.stage == "crop"
    assert [f.id for f in report.errors] == ["golden.diverged"] and report.errors[0].stage == "crop"
    lines = str(report).splitlines()
    assert lines[0].startswith(f"compare · {golden.path} vs toy now — not ok: 1 error")
    assert "first divergent stage: crop (tensor): 8 values differ (100%), first at [0, 0]: 1000 → 1040" in lines
    assert "downstream (1): audio.cropped" in lines and len(lines) <= 6


def test_compare_two_goldens(golden: sc.CaptureReport, tmp_path: Path) -> None:
    other = sc.capture(TOY, tmp_path / "other", seed=1)
    report = sc.compare(golden.path, golden2=other.path)
    assert not report.ok and report.pipeline is None and report.new == str(other.path)


def test_str_of_a_comparison_names_the_first_divergence(golden: sc.CaptureReport, tmp_path: Path) -> None:
    from toy_pipeline import ToyPipeline

    faulty = sc.capture(ToyPipeline("tokens"), tmp_path / "faulty")  # one code changed
    comparison = sc.compare_traces(sc.load_golden(golden.path).trace, sc.load_golden(faulty.path).trace)
    text = str(comparison)
    assert text.startswith("first divergent stage: tokens (tensor): 1 values differ")
    assert "Comparison(" not in text and "StageDiff(" not in text
    same = sc.compare_traces(sc.load_golden(golden.path).trace, sc.load_golden(golden.path).trace)
    assert str(same) == f"identical: all {len(golden.trace)} stages match the golden batch"


def test_to_json_is_the_command_lines_report(golden: sc.CaptureReport, cli_json) -> None:
    from toy_pipeline import ToyPipeline

    mine = json.loads(sc.compare(golden.path, ToyPipeline("crop")).to_json())
    theirs = cli_json("compare", str(golden.path), "--pipeline", TOY)
    assert list(mine) == list(theirs)
    assert list(mine["comparison"]) == list(theirs["comparison"])
    assert mine["comparison"]["first_divergence"]["stage"] == "crop"
    captured = json.loads(golden.to_json())
    assert list(captured) == list(cli_json("capture", TOY, "--out", str(golden.path)))


def test_to_html_writes_the_compare_page(golden: sc.CaptureReport, tmp_path: Path) -> None:
    from toy_pipeline import ToyPipeline

    page = sc.compare(golden.path, ToyPipeline("crop")).to_html(tmp_path / "c.html").read_text(encoding="utf-8")
    assert "<title>signalchain compare · first divergent stage: crop</title>" in page


def test_a_golden_of_an_object_needs_the_pipeline_named(tmp_path: Path) -> None:
    from toy_pipeline import ToyPipeline

    made = sc.capture(ToyPipeline(), tmp_path / "g")
    with pytest.raises(sc.UsageError, match=r"a golden is data, never code: pass pipeline=SPEC"):
        sc.compare(made.path)


@pytest.mark.parametrize("kwargs, match", [
    (dict(rtol=float("nan")), "rtol nan is not a tolerance"),
    (dict(tolerances={"nowhere": 1e-3}), "the golden has no stage 'nowhere'"),
    (dict(tolerances={"logits": "loose"}), "tolerance for stage 'logits' is 'loose'"),
    (dict(golden2="x", faults=["crop"]), "give either golden2 or a pipeline/faults"),
])
def test_bad_arguments_are_usage_errors(golden: sc.CaptureReport, kwargs: dict, match: str) -> None:
    with pytest.raises(sc.UsageError, match=match):
        sc.compare(golden.path, **kwargs)


def test_per_stage_tolerances_are_used(golden: sc.CaptureReport) -> None:
    from toy_pipeline import ToyPipeline

    report = sc.compare(golden.path, ToyPipeline("loss"), tolerances={"loss": (1.0, 0.0)})  # loss doubled
    assert "loss" not in [s.stage for s in report.comparison.stages if not s.equal]
