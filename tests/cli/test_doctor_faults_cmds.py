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


# Over 60 s on the shared 2-core box (78 s): the real `faults` command end to end, two faults and the
# clean control through worker processes (the smallest run that covers --workers and the control).
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


def test_doctor_help_lists_every_bundled_bed():
    from signalchain.cli._common import BED_LINES, BUILTIN_PIPELINES

    res = CliRunner().invoke(cli, ["doctor", "--help"])
    assert res.exit_code == 0, res.output
    for name in BUILTIN_PIPELINES:
        lines = [ln for ln in res.output.splitlines() if ln.split()[:1] == [name]]  # the help may wrap onto a name
        assert any(BED_LINES[name] in ln for ln in lines), (name, res.output[-600:])


def test_faults_group_picks_catalogue_groups_and_family_says_so(tmp_path):
    out = tmp_path / "g.json"
    res = CliRunner().invoke(cli, ["faults", "--list", "--group", "flat_loss", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["faults"]
    assert rows and {r["family"] for r in rows} == {"flat_loss"}
    res = CliRunner().invoke(cli, ["faults", "--list", "--group", "numerics"])  # a doctor family, not a group
    assert res.exit_code == 2 and "no fault in groups ['numerics']" in res.output and "flat_loss" in res.output
    res = CliRunner().invoke(cli, ["faults", "--list", "--family", "flat_loss"])
    assert res.exit_code == 2 and "--group flat_loss" in res.output
    options = [ln.split()[0] for ln in CliRunner().invoke(cli, ["faults", "--help"]).output.splitlines()
               if ln.strip().startswith("--")]
    assert "--group" in options and "--family" not in options  # the old name is hidden
