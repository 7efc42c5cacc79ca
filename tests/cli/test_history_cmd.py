"""`signalchain history`: exit codes, the JSON report, the printed bisect line, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from _history_logs import hf_run, hf_state, write_state
from signalchain.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, ["history", *args], catch_exceptions=False)


def test_a_clean_run_exits_0_and_a_nan_run_exits_1_with_the_line(tmp_path) -> None:
    res = _run(str(hf_run(tmp_path / "clean")), "--json", str(tmp_path / "c.json"))
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "c.json").read_text())["bisect"]["command"] is None
    bad = tmp_path / "bad"
    for s in (10, 20, 30):
        write_state(bad / f"checkpoint-{s}" / "trainer_state.json", hf_state(s, nan_at=25))
        (bad / f"checkpoint-{s}" / "model.safetensors").write_bytes(b"\0")
    res = _run(str(bad), "--golden", "g", "--json", str(tmp_path / "b.json"), "--html", str(tmp_path / "b.html"))
    assert res.exit_code == 1
    # the command is one line of its own, never wrapped, whatever the width: it copies and pastes as is
    assert f"signalchain bisect g --checkpoints {bad} --steps 20:30" in res.output.splitlines()
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["findings"][0]["id"] == "history.nonfinite" and doc["findings"][0]["evidence"]["step"] == 25
    assert (tmp_path / "b.html").read_text().count("<img") >= 3


def test_a_missing_or_unknown_run_is_one_line_and_exit_2(tmp_path) -> None:
    res = CliRunner().invoke(cli, ["history", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such file or folder" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    (tmp_path / "x.txt").write_text("x")
    res = CliRunner().invoke(cli, ["history", str(tmp_path)])
    assert res.exit_code == 2 and "holds no run log signalchain reads" in res.output


def _nan_run(root: Path) -> Path:
    for s in (10, 20, 30):
        write_state(root / f"checkpoint-{s}" / "trainer_state.json", hf_state(s, nan_at=25))
        (root / f"checkpoint-{s}" / "model.safetensors").write_bytes(b"\0")
    return root


def test_the_json_report_has_its_contract_shape(tmp_path) -> None:
    bad = _nan_run(tmp_path / "bad")
    res = _run(str(bad), "--pipeline", "pkg.mod:pipe", "--json", str(tmp_path / "b.json"))
    assert res.exit_code == 1
    doc = json.loads((tmp_path / "b.json").read_text())
    assert {"signalchain", "findings", "history", "bisect"} <= set(doc)
    assert {"format", "axis", "series", "checkpoints", "notes"} <= set(doc["history"])
    assert [c["step"] for c in doc["history"]["checkpoints"]] == [10, 20, 30]
    assert doc["bisect"]["args"] == {"checkpoints": str(bad), "steps": "20:30", "golden": None,
                                     "pipeline": "pkg.mod:pipe"}
    assert doc["bisect"]["command"].startswith("signalchain bisect GOLDEN --checkpoints")


def test_bisect_needs_a_golden_and_says_so_in_one_line(tmp_path) -> None:
    res = CliRunner().invoke(cli, ["history", str(_nan_run(tmp_path)), "--bisect"])
    assert res.exit_code == 2 and "--bisect runs the printed line on a golden batch" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_bisect_runs_the_printed_line_with_the_bisect_commands_function(tmp_path, monkeypatch) -> None:
    from signalchain.cli import _bisect_checkpoints

    calls = []

    def fake(**kw):
        calls.append(kw)
        return 1

    monkeypatch.setattr(_bisect_checkpoints, "run_checkpoints_mode", fake)
    bad = _nan_run(tmp_path / "bad")
    res = _run(str(bad), "--golden", "g", "--pipeline", "p.py:x", "--bisect")
    assert res.exit_code == 1 and "running: signalchain bisect g --checkpoints" in res.output.replace("\n", " ")
    (kw,) = calls
    assert (kw["golden"], kw["checkpoints"], kw["step_range"], kw["pipeline"]) == ("g", str(bad), "20:30", "p.py:x")
    assert (kw["rtol"], kw["atol"], kw["factor"]) == (1e-5, 1e-6, 10.0)  # the bisect command's defaults
    res = _run(str(hf_run(tmp_path / "clean")), "--golden", "g", "--bisect")  # nothing broke: nothing to run
    assert res.exit_code == 0 and "--bisect: no line to run" in res.output and len(calls) == 1


def test_bisect_steps_needs_checkpoints_and_a_range(tmp_path) -> None:
    res = CliRunner().invoke(cli, ["bisect", "g", "--good", "a", "--bad", "b", "--steps", "1:2"])
    assert res.exit_code == 2 and "--steps selects checkpoints" in res.output
    from signalchain.cli._bisect_checkpoints import parse_step_range

    assert parse_step_range("200:400") == (200, 400) and parse_step_range(":5") == (None, 5)
    import pytest

    from signalchain.errors import UsageError

    with pytest.raises(UsageError, match="not a step range"):
        parse_step_range("200-400")
    with pytest.raises(UsageError, match="first step is after the last"):
        parse_step_range("5:1")
