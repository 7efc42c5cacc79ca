"""capture / compare / inspect through the CLI, on the toy pipeline (exit codes per DESIGN §5)."""

import json

import pytest
from click.testing import CliRunner

from signalchain.cli import cli

TOY = "tests/toy_pipeline.py:make"


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def golden(tmp_path, runner):
    out = tmp_path / "golden"
    res = runner.invoke(cli, ["capture", TOY, "--out", str(out), "--seed", "1", "--json", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    return out


def test_capture_writes_a_golden_and_json(golden, tmp_path):
    assert (golden / "manifest.json").is_file() and (golden / "values.safetensors").is_file()
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["signalchain"] and report["findings"] == []
    assert [s["name"] for s in report["stages"]][:3] == ["audio.original", "caption", "metadata"]


def test_compare_with_a_fresh_run_is_identical(golden, runner, tmp_path):
    # the golden names its pipeline by a file path, which compare never runs on the manifest's word
    res = runner.invoke(cli, ["compare", str(golden), "--pipeline", TOY, "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "identical" in res.output
    assert f"re-running pipeline {TOY} (from --pipeline)" in res.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["comparison"]["identical"] is True and rep["comparison"]["first_divergence"] is None
    assert rep["pipeline"] == {"spec": TOY, "source": "--pipeline", "seed": 1}


@pytest.mark.parametrize(
    "change,stage", [("crop", "crop"), ("tokens", "tokens"), ("mask", "mask.loss"), ("loss", "loss")]
)
def test_compare_names_the_changed_stage_first(golden, runner, tmp_path, change, stage):
    spec = tmp_path / f"changed_{change}.py"
    spec.write_text(
        "import sys\nsys.path.insert(0, 'tests')\n"
        f"from toy_pipeline import ToyPipeline\npipe = ToyPipeline({change!r})\n"
    )
    out = tmp_path / "r.json"
    res = runner.invoke(
        cli,
        ["compare", str(golden), "--pipeline", f"{spec}:pipe", "--json", str(out), "--html", str(tmp_path / "r.html")],
    )
    assert res.exit_code == 1, res.output
    rep = json.loads(out.read_text())
    assert rep["comparison"]["first_divergence"]["stage"] == stage
    assert rep["findings"][0]["id"] == "golden.diverged" and rep["findings"][0]["stage"] == stage
    assert f"first divergent stage: {stage}" in res.output
    html = (tmp_path / "r.html").read_text()
    assert "FIRST DIVERGENCE" in html and "http://" not in html and "https://" not in html


def test_compare_two_goldens(golden, runner, tmp_path):
    other = tmp_path / "other"
    assert runner.invoke(cli, ["capture", TOY, "--out", str(other), "--seed", "2"]).exit_code == 0
    res = runner.invoke(cli, ["compare", str(golden), str(other)])
    assert res.exit_code == 1 and "first divergent stage: audio.original" in res.output
    assert runner.invoke(cli, ["compare", str(golden), str(golden)]).exit_code == 0


def test_inspect_html_is_self_contained_with_players_and_images(golden, runner, tmp_path):
    out = tmp_path / "inspect.html"
    res = runner.invoke(cli, ["inspect", str(golden), "--html", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert html.count("<audio controls") >= 4 * 3  # every example of each audio stage
    assert "data:image/png;base64," in html
    assert "tone at" in html  # captions printed beside the audio
    assert "tokens decoded" in html
    for marker in ("http://", "https://", "<script src", "<link "):
        assert marker not in html


def test_usage_and_input_errors_exit_2_with_one_line(runner, tmp_path):
    res = runner.invoke(cli, ["compare", str(tmp_path)])
    assert res.exit_code == 2
    assert "manifest.json: missing" in res.output and "Traceback" not in res.output
    res = runner.invoke(cli, ["capture", "nope.py:x", "--out", str(tmp_path / "g")])
    assert res.exit_code == 2 and "no such file or folder" in res.output
    res = runner.invoke(cli, ["capture", TOY, "--out", str(tmp_path / "g"), "--fault", "mask_all_padding"])
    assert res.exit_code == 2 and "--fault needs a pipeline with with_faults" in res.output
    res = runner.invoke(cli, ["compare", str(tmp_path), "--tol", "oops"])
    assert res.exit_code == 2


def test_damaged_golden_is_exit_2_naming_the_file(golden, runner):
    f = golden / "values.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    res = runner.invoke(cli, ["inspect", str(golden)])
    assert res.exit_code == 2 and "values.safetensors" in res.output


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("signalchain: error:"), res.stderr
    assert "re-running" not in res.output and "first divergent" not in res.output
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args,needles", [
    (["--rtol", "-1"], ["--rtol '-1.0' is not a tolerance"]),
    (["--atol", "nan"], ["--atol 'nan' is not a tolerance"]),
    (["--rtol", "inf"], ["--rtol 'inf' is not a tolerance"]),
    (["--tol", "logits=nan"], ["--tol 'logits=nan': 'nan' is not a tolerance"]),
    (["--tol", "logits=1e-3,-1"], ["'-1' is not a tolerance"]),
    (["--tol", "x=1,2,3"], ["--tol 'x=1,2,3' is not STAGE=RTOL[,ATOL]"]),
    (["--tol", "logits=abc"], ["is not STAGE=RTOL[,ATOL]"]),
    (["--tol", "=1"], ["is not STAGE=RTOL[,ATOL]"]),
    (["--tol", "logit=1e-3"], ["the golden has no stage 'logit'; its stages: audio.original, caption", "logits"]),
    (["--tol", "logits=1", "--tol", "logits=2"], ["gives stage 'logits' twice"]),
])
def test_bad_tolerances_are_usage_errors_before_anything_runs(golden, runner, args, needles):
    _one_line_error(runner.invoke(cli, ["compare", str(golden), "--pipeline", TOY, *args]), *needles)


@pytest.mark.parametrize("args,needles", [
    (["--seed", "-1"], ["--seed -1 is not a seed: give an integer from 0 to 4294967295"]),
    (["--seed", str(2**32)], ["is not a seed"]),
    (["--fault", "nope"], ["unknown fault 'nope'", "faults --list"]),
])
def test_bad_capture_options_are_usage_errors(runner, tmp_path, args, needles):
    spec = TOY if "--seed" in args else "reference"
    _one_line_error(runner.invoke(cli, ["capture", spec, "--out", str(tmp_path / "g"), *args]), *needles)
    assert list(tmp_path.iterdir()) == []


def test_capture_never_deletes_a_folder_that_is_not_a_golden(runner, tmp_path):
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "train.py").write_text("precious")
    (work / "README.md").write_text("precious")
    res = runner.invoke(cli, ["capture", TOY, "--out", str(work)])
    _one_line_error(res, "is not empty and not a golden batch", "README.md, src")
    assert (work / "src" / "train.py").read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == [
        "work"
    ]


@pytest.mark.parametrize("out", [".", ".."])
def test_capture_into_the_current_folder_or_above_is_a_usage_error(runner, tmp_path, monkeypatch, out):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    # refused before the pipeline is even looked up
    _one_line_error(runner.invoke(cli, ["capture", TOY, "--out", out]), "current folder")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["here"]


def test_capture_where_nothing_can_be_written_is_a_usage_error(runner, tmp_path):
    (tmp_path / "file").write_text("x")
    _one_line_error(runner.invoke(cli, ["capture", TOY, "--out", str(tmp_path / "file" / "g")]), "not a folder")
    _one_line_error(runner.invoke(cli, ["capture", TOY, "--out", str(tmp_path / "file")]), "is a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_golden_left_only_at_previous_is_found_by_every_command(golden, runner, tmp_path):
    previous = golden.with_name(golden.name + ".previous")
    golden.rename(previous)  # a save killed between its two renames
    res = runner.invoke(cli, ["inspect", str(golden)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["compare", str(golden), "--pipeline", TOY])
    assert res.exit_code == 0 and "identical" in res.output, res.output
    assert runner.invoke(cli, ["compare", str(golden), str(golden)]).exit_code == 0
    res = runner.invoke(cli, ["capture", TOY, "--out", str(golden), "--seed", "2"])  # over the fallback
    assert res.exit_code == 0, res.output
    assert golden.is_dir() and not previous.exists()
    assert json.loads((golden / "manifest.json").read_text())["provenance"]["seed"] == 2  # the new capture


def test_a_tampered_second_golden_is_exit_2(golden, runner, tmp_path):
    other = tmp_path / "other"
    assert runner.invoke(cli, ["capture", TOY, "--out", str(other), "--seed", "1"]).exit_code == 0
    m = other / "manifest.json"
    m.write_text(m.read_text().replace('"mask.loss"', '"mask.lost"', 1))
    _one_line_error(
        runner.invoke(cli, ["compare", str(golden), str(other)]), "manifest.json: was changed after capture"
    )


def test_inspect_judges_a_written_stage_beyond_full_scale(tmp_path, runner):
    """A golden whose written audio overshoots: `audio.overshoot` (warning, exit 0) with its numbers; the
    same golden's decoded stage past ±1 (an untrained decoder does that) is not judged."""
    from _overshoot import SR, hot
    from _traces import make_trace
    from signalchain.golden import save_golden

    x = hot(peak_db=7.8, share=0.0017)[None, None]
    trace = make_trace(("audio.decoded", 2.0 * x, {"sample_rate": SR}),
                       ("audio.written", x, {"sample_rate": SR, "subtype": "FLOAT"}))
    save_golden(tmp_path / "g", trace, {"pipeline": "hand-made", "seed": 0})
    res = runner.invoke(cli, ["inspect", str(tmp_path / "g"), "--json", str(tmp_path / "i.json")])
    assert res.exit_code == 0, res.output
    (f,) = json.loads((tmp_path / "i.json").read_text())["findings"]
    assert (f["id"], f["severity"], f["stage"]) == ("audio.overshoot", "warning", "audio.written")
    assert "+7.8 dBFS" in f["message"] and "0.17% of samples" in f["message"]
