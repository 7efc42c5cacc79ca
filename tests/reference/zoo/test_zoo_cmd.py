"""`signalchain zoo` and `score_zoo`'s tally: the table, the false-alarm rates, the exit code."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from signalchain.cli import cli
from signalchain.experiments.scoring import ZooRun, ZooScore, family_of


def _f(fid, sev, check):
    return {"id": fid, "severity": sev, "stage": None, "message": "", "evidence": {}, "check": check}


def test_family_of_reads_the_judge_module():
    assert family_of(_f("optim.lr_too_small", "error", "checks.training")) == "optimisation"
    assert family_of(_f("model.capacity", "warning", "checks.training")) == "optimisation"
    assert family_of(_f("targets.misaligned", "error", "checks.inputs")) == "data"
    assert family_of(_f("loss.initial", "warning", "checks.data")) == "data"
    assert family_of(_f("symbolic.structure", "warning", "checks.symbolic")) == "data"
    assert family_of(_f("symbolic.repetitive", "warning", "checks.symbolic")) == "generation"
    assert family_of(_f("loss.stale_predictions", "error", "checks.stale")) == "optimisation"
    assert family_of(_f("loader.stale_cache", "error", "checks.stale")) == "data"
    assert family_of(_f("split.duplicate", "warning", "audit.judge_splits")) == "splits"
    assert family_of(_f("generation.silent", "error", "checks.output")) == "output"
    assert family_of(_f("internal.check_failed", "error", "optimisation.update")) == "optimisation"
    assert family_of(_f("internal.check_failed", "error", "doctor.optimisation.update")) == "optimisation"
    assert family_of(_f("perf.stall", "warning", "")) == "performance"


def test_false_alarm_rates_count_runs_not_findings():
    members = [{"name": "a", "bed": "x"}, {"name": "b", "bed": "y"}]
    runs = [ZooRun("a", 0, [_f("w.x", "warning", "checks.data"), _f("w.x", "warning", "checks.data")]),
            ZooRun("a", 1, []),
            ZooRun("b", 0, [_f("e.y", "error", "checks.training"), _f("w.x", "warning", "checks.data")]),
            ZooRun("b", 1, [], error="RuntimeError: boom")]
    score = ZooScore(members, [0, 1], runs, ["data", "optimisation"])
    fa = score.false_alarms()
    assert list(fa) == ["e.y", "w.x"]  # errors first
    assert fa["w.x"]["runs"] == 2 and fa["w.x"]["of"] == 4 and fa["w.x"]["rate"] == 0.5
    assert fa["w.x"]["members"] == ["a", "b"] and fa["e.y"]["errors"] == 1
    d = score.to_dict()
    assert d["summary"]["errors"] == 2  # one error finding and one failed run: both defects
    assert d["summary"]["runs_with_error"] == 2 and d["summary"]["failed_runs"] == 1
    rows = {r["member"]: r for r in d["table"]}
    assert rows["a"]["families"]["data"]["warning"] == {"w.x": 2}
    assert rows["b"]["families"]["optimisation"]["error"] == {"e.y": 1} and rows["b"]["failed_runs"] == 1


def test_zoo_usage_errors_exit_2():
    res = CliRunner().invoke(cli, ["zoo", "--members", "nope"])
    assert res.exit_code == 2 and "unknown zoo member 'nope'" in res.output
    res = CliRunner().invoke(cli, ["zoo", "--members", "sym", "--fast"])
    assert res.exit_code == 2 and "not both" in res.output
    res = CliRunner().invoke(cli, ["zoo", "--members", "sym", "--families", "nope"])
    assert res.exit_code == 2 and "unknown family 'nope'" in res.output
    res = CliRunner().invoke(cli, ["zoo", "no.such.zoo"])
    assert res.exit_code == 2 and "cannot import zoo" in res.output


def test_zoo_list_json(tmp_path):
    out = tmp_path / "z.json"
    res = CliRunner().invoke(cli, ["zoo", "--list", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    names = [m["name"] for m in rep["members"]]
    assert len(names) >= 40 and len(names) == len(set(names))
    assert all(m["why"] and m["spec"].endswith(m["name"]) for m in rep["members"])


@pytest.mark.slow
def test_zoo_runs_a_member_and_writes_its_report(tmp_path):
    pytest.importorskip("miditok")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["zoo", "--members", "sym", "--families", "audio,numerics", "--seeds", "0",
                                   "--workers", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["signalchain"] and [m["name"] for m in rep["members"]] == ["sym"]
    assert [(r["member"], r["seed"]) for r in rep["runs"]] == [("sym", 0)]
    assert rep["summary"]["errors"] == 0 and rep["false_alarms"] == {}
    lines = (tmp_path / "r.json.runs.jsonl").read_text().splitlines()
    assert [json.loads(x)["member"] for x in lines] == ["sym"]


def test_a_resumed_zoo_keeps_what_it_measured_and_runs_only_the_rest(tmp_path):
    """A zoo stopped part-way is resumed from its run log: the runs in it are not run again, a torn last
    line and a run measured under another budget are run again."""
    pytest.importorskip("miditok")
    out = tmp_path / "r.json"
    log = tmp_path / "r.json.runs.jsonl"
    kept = {"member": "sym", "seed": 0, "part": "families", "budget": "business", "families": ["audio", "numerics"],
            "findings": [_f("audio.clipped", "warning", "checks.audio")], "info_ids": ["x.y"], "seconds": 1.0}
    other = {**kept, "seed": 1, "budget": "quick"}
    log.write_text(json.dumps(kept) + "\n" + json.dumps(other) + "\n" + '{"member": "sym", "se')
    res = CliRunner().invoke(cli, ["zoo", "--members", "sym", "--families", "audio,numerics", "--seeds", "0,1",
                                   "--workers", "1", "--json", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    runs = {r["member"] + str(r["seed"]): r for r in rep["runs"]}
    assert runs["sym0"]["findings"] == kept["findings"]  # kept as measured, not run again
    assert runs["sym1"]["findings"] == [] and runs["sym1"]["seconds"] > 1.0  # the other budget's run: run again
    new = [json.loads(x) for x in log.read_text().splitlines()[3:]]
    assert [(r["member"], r["seed"], r["budget"]) for r in new] == [("sym", 1, "business")]
    res = CliRunner().invoke(cli, ["zoo", "--members", "sym", "--resume"])
    assert res.exit_code == 2 and "--json" in res.output
