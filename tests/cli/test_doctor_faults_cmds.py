import json

from click.testing import CliRunner

from signalchain.cli import cli


def test_doctor_cli_reports_a_fault_with_exit_1(tmp_path):
    out = tmp_path / "d.json"
    res = CliRunner().invoke(cli, ["doctor", "--family", "data", "--budget", "economy", "--fault", "crop_in_padding",
                                   "--json", str(out), "--html", str(tmp_path / "d.html")])
    assert res.exit_code == 1, res.output
    rep = json.loads(out.read_text())
    assert rep["signalchain"] and rep["families"] == ["data"]
    assert any(f["id"] == "crop.in_padding" and f["stage"] == "crop" for f in rep["findings"])
    assert "crop.in_padding" in (tmp_path / "d.html").read_text()


def test_doctor_cli_usage_errors_exit_2():
    res = CliRunner().invoke(cli, ["doctor", "--family", "nope"])
    assert res.exit_code == 2 and "unknown family 'nope'" in res.output
    res = CliRunner().invoke(cli, ["doctor", "--symptom", "nope"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["doctor", "--fault", "nope"])
    assert res.exit_code == 2 and "unknown fault 'nope'" in res.output and "internal error" not in res.output


def test_faults_list_json(tmp_path):
    out = tmp_path / "f.json"
    res = CliRunner().invoke(cli, ["faults", "--list", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    names = [f["name"] for f in rep["faults"]]
    assert "mask_all_padding" in names and len(names) == len(set(names))
    for f in rep["faults"]:
        assert set(f) >= {"name", "family", "cause", "expected_ids", "expected_stage"} and f["expected_ids"]


def test_faults_scores_a_subset_with_a_control(tmp_path):
    out = tmp_path / "s.json"
    res = CliRunner().invoke(cli, ["faults", "--fault", "mask_all_padding", "--fault", "codebooks_swapped",
                                   "--seeds", "0", "--workers", "2", "--budget", "economy", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    rows = {f["name"]: f for f in rep["faults"]}
    assert rows["mask_all_padding"]["detected"] and rows["mask_all_padding"]["localised"]
    assert rows["codebooks_swapped"]["detected"] and rows["codebooks_swapped"]["localised"]
    assert rep["control"]["seeds"] == [0] and rep["control"]["errors"] == 0


def test_faults_unknown_name_exits_2():
    res = CliRunner().invoke(cli, ["faults", "--fault", "nope"])
    assert res.exit_code == 2 and "unknown fault 'nope'" in res.output
