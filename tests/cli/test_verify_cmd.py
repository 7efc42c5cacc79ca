"""`signalchain verify` end to end on the cheap numerics family: exit codes, the JSON record, the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from signalchain.cli import cli

HELPERS = Path(__file__).parents[1] / "experiments" / "verify_pipelines.py"
NAN = ["--before-fault", "kl_soft_targets_log_zero", "--family", "numerics", "--control", "audio"]


def verify(*args: str):
    return CliRunner().invoke(cli, ["verify", *args])


@pytest.mark.slow
def test_a_real_nan_fix_is_fixed_with_exit_0(tmp_path):
    out = tmp_path / "v.json"
    res = verify(*NAN, "--seeds", "2", "--json", str(out))  # --after: the reference, where the NaN is fixed
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    v = rep["verify"]
    assert v["verdict"] == "fixed" and v["tests"] == {"failure_gone": True, "control_ok": True, "every_seed": True}
    assert [f["id"] for f in rep["findings"]] == ["verify.fixed"]
    assert [r["measure"] for r in v["before"]["runs"]] == [5.0, 5.0]
    assert [r["measure"] for r in v["after"]["runs"]] == [0, 0]
    assert {e["id"] for e in v["before"]["runs"][0]["errors"]} == {"nonfinite.first", "nonfinite.loss"}
    assert "verdict: fixed" in res.output and "pass  3. every seed agrees" in res.output
    assert "the failure is gone on 2 of 2 seeds; with 2 seeds a failure rate up to 84% is still possible" in res.output
    assert v["interval"] is None and v["rate"]["n"] == 2  # a goal measure: 0/1 per seed, no t interval


@pytest.mark.slow
def test_a_masking_fix_persists_with_exit_1_and_its_record(tmp_path):
    out, page = tmp_path / "v.json", tmp_path / "v.html"
    res = verify(*NAN, "--after", f"{HELPERS}:masked_nan", "--json", str(out), "--html", str(page))
    assert res.exit_code == 1, res.output
    rep = json.loads(out.read_text())
    v = rep["verify"]
    assert rep["signalchain"] and v["verdict"] == "failure_persists" and v["tests"]["failure_gone"] is False
    assert [s["seed"] for s in v["seeds"]] == [0, 1, 2] and v["interval"] is None and v["rate"]["passed"] == 0
    assert v["measure"]["name"] == "loss_nonfinite" and v["control"] == ["audio"]
    (f,) = rep["findings"]
    assert f["id"] == "verify.failure_persists" and f["stage"] == "loss.per_codebook"
    html = page.read_text()
    for part in ("The three tests", "Before and after, seed by seed", "Golden audio, both sides", "<audio",
                 "failure_persists", "loss.per_codebook"):
        assert part in html, part
    assert html.count("<audio") >= 4  # both sides' audio stages


@pytest.mark.slow
def test_a_failing_state_that_does_not_fail_exits_1():
    res = verify("--family", "numerics", "--control", "none", "--seeds", "1")
    assert res.exit_code == 1 and "verify.not_reproducible" in res.output, res.output


@pytest.mark.parametrize("args, says", [
    ((), "needs --symptom S or --family F"),
    (("--family", "numerics", "--seeds", "0"), "--seeds 0 is not a number of seeds"),
    (("--family", "nope"), "unknown family 'nope'"),
    (("--family", "numerics", "--control", "nope"), "unknown family 'nope'"),
    (("--family", "numerics", "--control", "numerics"), "also a family under test"),
    (("--symptom", "nope"), "nope"),
    (("--family", "numerics", "--before-fault", "nope"), "unknown fault 'nope'"),
])
def test_usage_errors_exit_2(args, says):
    res = verify(*args)
    assert res.exit_code == 2 and says in res.output, res.output


@pytest.mark.slow
def test_a_control_that_cannot_run_is_inconclusive_with_exit_3(tmp_path):
    """The issue's run: --symptom nan on a pipeline with no caption. The conditioning control looks at nothing;
    that was printed as "the control (conditioning) holds … pass" and a t interval on a 0/1 measure."""
    out, page = tmp_path / "v.json", tmp_path / "v.html"
    res = verify("--before", f"{HELPERS}:plain_nan", "--after", f"{HELPERS}:plain_fixed", "--symptom", "nan",
                 "--seeds", "2", "--json", str(out), "--html", str(page))
    assert res.exit_code == 3, res.output
    rep = json.loads(out.read_text())
    (f,) = rep["findings"]
    assert (f["id"], f["severity"]) == ("verify.inconclusive", "warning")
    assert "the control (conditioning) could not run" in f["message"] and "taps no `caption` stage" in f["message"]
    assert "2 of 2 seeds" in f["message"] and "Student" not in f["message"] and "holds" not in f["message"]
    v = rep["verify"]
    assert v["verdict"] == "inconclusive" and v["tests"]["control_ok"] is None and v["tests"]["failure_gone"] is True
    assert v["control_evidence"][0]["judged"] == {"conditioning": []}
    assert v["after"]["runs"][0]["control_steps"]["conditioning"]["data"].startswith("skipped: ")
    assert "NOT RUN  2. an unaffected control still works" in res.output and "verdict: inconclusive" in res.output
    html = page.read_text()
    assert "could not run" in html and "judged nothing" in html
    ok = verify("--before", f"{HELPERS}:plain_nan", "--after", f"{HELPERS}:plain_fixed", "--symptom", "nan",
                "--seeds", "1", "--control", "none", "--json", str(out))
    assert ok.exit_code == 0 and "skipped  2. an unaffected control" in ok.output, ok.output
    (f,) = json.loads(out.read_text())["findings"]  # waived knowingly: fixed, and saying that test 2 did not run
    assert f["id"] == "verify.fixed" and "no control was run (--control none)" in f["message"]
