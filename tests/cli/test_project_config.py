"""`[tool.signalchain]` / `signalchain.toml`: found from the current folder up, explicit arguments win,
a bad key is one line naming the file and the key (exit 2), and without one nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from signalchain.cli import cli
from signalchain.cli._project import find_config, project_config

TOY = Path(__file__).parents[1] / "toy_pipeline.py"


def _project(root: Path, table: str, *, name: str = "pyproject.toml") -> Path:
    """A user's project: train/debug.py (the toy pipeline) and its configuration."""
    (root / "train").mkdir(parents=True)
    (root / "train" / "toy.py").write_text(TOY.read_text())
    (root / "train" / "debug.py").write_text("from toy import ToyPipeline\n\npipeline = ToyPipeline()\n")
    head = "[project]\nname = 'mine'\n\n[tool.signalchain]\n" if name == "pyproject.toml" else ""
    (root / name).write_text(head + table)
    return root


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line_exit_2(res, *needles: str) -> str:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in res.stderr, res.stderr
    return res.stderr


def test_found_from_a_subfolder_and_used_by_capture_and_compare(tmp_path, monkeypatch) -> None:
    root = _project(tmp_path / "proj", 'pipeline = "train/debug.py:pipeline"\nseed = 3\n')
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")
    res = _run("capture", "--out", "golden", "--json", str(tmp_path / "c.json"))
    assert res.exit_code == 0, res.output
    assert "pipeline train/debug.py:pipeline (from ../pyproject.toml [tool.signalchain])" in res.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["pipeline"] == {"spec": f"{(root / 'train' / 'debug.py').resolve()}:pipeline",
                               "source": "../pyproject.toml [tool.signalchain]"}
    manifest = json.loads((root / "notebooks" / "golden" / "manifest.json").read_text())
    assert manifest["provenance"]["seed"] == 3  # the configuration's default seed
    # the second command of the recipe: no spec repeated, the golden's path never run
    res = _run("compare", "golden", "--json", str(tmp_path / "d.json"))
    assert res.exit_code == 0, res.output
    assert "re-running pipeline train/debug.py:pipeline (from ../pyproject.toml [tool.signalchain])" in res.output
    ran = json.loads((tmp_path / "d.json").read_text())["pipeline"]
    assert ran["source"] == "../pyproject.toml [tool.signalchain]" and ran["seed"] == 3


def test_an_explicit_argument_wins(tmp_path, monkeypatch) -> None:
    root = _project(tmp_path / "proj", 'pipeline = "train/missing.py:pipeline"\nseed = 3\nout = "from-config"\n')
    monkeypatch.chdir(root)
    res = _run("capture", "train/debug.py:pipeline", "--out", "golden", "--seed", "5")
    assert res.exit_code == 0, res.output
    assert "(from the command line)" in res.output
    assert not (root / "from-config").exists()
    manifest = json.loads((root / "golden" / "manifest.json").read_text())
    assert manifest["provenance"]["seed"] == 5
    res = _run("compare", "golden", "--pipeline", "train/debug.py:pipeline")
    assert res.exit_code == 0 and "(from --pipeline)" in res.output, res.output
    # the configuration's (missing) file is what runs when nothing is named: its error says so
    res = _run("compare", "golden")
    assert res.exit_code == 2 and "missing.py" in res.stderr, res.output


def test_out_comes_from_the_configuration(tmp_path, monkeypatch) -> None:
    root = _project(tmp_path / "proj", 'pipeline = "train/debug.py:pipeline"\nout = "goldens/main"\n')
    (root / "sub").mkdir()
    monkeypatch.chdir(root / "sub")
    res = _run("capture")
    assert res.exit_code == 0, res.output
    assert (root / "goldens" / "main" / "manifest.json").is_file()  # relative to the configuration's folder


def test_signalchain_toml_is_the_same_keys_at_top_level(tmp_path, monkeypatch) -> None:
    root = _project(tmp_path / "proj", 'pipeline = "train/debug.py:pipeline"\n', name="signalchain.toml")
    monkeypatch.chdir(root)
    res = _run("capture", "--out", "golden")
    assert res.exit_code == 0, res.output
    assert "pipeline train/debug.py:pipeline (from signalchain.toml)" in res.output


@pytest.mark.parametrize("table, key, why", [
    ('pipline = "train/debug.py:pipeline"\n', "pipline", "did you mean 'pipeline'"),
    ('pipeline = "train/debug.py:pipeline"\nseed = "3"\n', "seed", "valid integer"),
    ('pipeline = "train/debug.py:pipeline"\nseed = -1\n', "seed", "not a seed"),
    ('pipeline = "train/debug.py:pipeline"\nbudget = "huge"\n', "budget", "not a budget"),
    ('pipeline = "train/debug.py"\n', "pipeline", "no ':attr'"),
    ('hf_musicgen = "model"\n', "hf_musicgen", "needs data"),
    ('data = ["d"]\n', "data", "goes with hf_musicgen"),
    ('hf_musicgen = "m"\ndata = ["d"]\nhf_set = {lr = "fast"}\n', "hf_set", "'fast' is not a float"),
])
def test_a_bad_key_is_one_line_naming_the_file_and_the_key(tmp_path, monkeypatch, table, key, why) -> None:
    root = _project(tmp_path / "proj", table)
    monkeypatch.chdir(root)
    for argv in (("capture", "--out", "g"), ("compare", "g"), ("doctor",), ("verify", "--family", "data"),
                 ("bisect", "g", "--checkpoints", "c/*")):
        err = _one_line_exit_2(_run(*argv), "pyproject.toml", f"[tool.signalchain] {key}:", why)
        assert str(root / "pyproject.toml") in err, argv


def test_bad_toml_is_one_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "signalchain.toml").write_text("pipeline = [unclosed\n")
    monkeypatch.chdir(tmp_path)
    _one_line_exit_2(_run("capture", "--out", "g"), "signalchain.toml: not valid TOML")


def test_discovery_stops_at_the_top_of_the_repository(tmp_path) -> None:
    _project(tmp_path, 'pipeline = "train/debug.py:pipeline"\n')
    inner = tmp_path / "other-repo" / "src"
    inner.mkdir(parents=True)
    (tmp_path / "other-repo" / ".git").mkdir()
    assert find_config(inner) is None  # the outer project's configuration is not this repository's
    (tmp_path / "other-repo" / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no [tool.signalchain]
    assert find_config(inner) is None
    found = project_config(tmp_path / "train")
    assert found is not None and found.path == tmp_path / "pyproject.toml"


def test_without_a_configuration_nothing_changes(tmp_path, monkeypatch) -> None:
    """No configuration: capture takes the named pipeline, compare the golden's importable module."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "toy_mod.py").write_text(TOY.read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = _run("capture", "toy_mod:ToyPipeline", "--out", "goldens/main")
    assert res.exit_code == 0 and "(from the command line)" in res.output, res.output
    res = _run("compare", "goldens/main")
    assert res.exit_code == 0, res.output
    assert "re-running pipeline toy_mod:ToyPipeline (from the golden's manifest)" in res.output
    _one_line_exit_2(_run("capture"), "capture needs --out DIR")


def test_faults_keeps_the_reference_catalogue(tmp_path, monkeypatch) -> None:
    _project(tmp_path, 'pipeline = "train/debug.py:pipeline"\n')
    monkeypatch.chdir(tmp_path)
    res = _run("faults", "--list", "--json", str(tmp_path / "f.json"))
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "f.json").read_text())["faults"]


def test_a_module_spec_is_imported_from_the_configurations_folder(tmp_path, monkeypatch) -> None:
    root = tmp_path / "proj"
    (root / "deep" / "er").mkdir(parents=True)
    (root / "sc_cfg_toy.py").write_text(TOY.read_text() + "\n\npipeline = ToyPipeline()\n")
    (root / "pyproject.toml").write_text('[tool.signalchain]\npipeline = "sc_cfg_toy:pipeline"\nseed = 2\n')
    monkeypatch.chdir(root / "deep" / "er")
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the folder it adds goes with the test
    res = _run("doctor", "--family", "data", "--json", str(tmp_path / "d.json"))
    assert res.exit_code in (0, 1), res.output
    assert "pipeline sc_cfg_toy:pipeline (from ../../pyproject.toml [tool.signalchain])" in res.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["pipeline"] == "sc_cfg_toy:pipeline"
    assert doc["pipeline_source"] == "../../pyproject.toml [tool.signalchain]"


def test_verify_at_a_commit_runs_the_configured_file_from_that_commits_tree(tmp_path, monkeypatch) -> None:
    """`verify --before-rev REV` with the pipeline from the configuration: the file as the commit has it
    (relative to the repository's top), not the work tree's copy; a saved HF model is refused there."""
    import subprocess

    from signalchain.cli.verify_cmd import _configured_spec
    from signalchain.errors import UsageError

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _project(tmp_path / "app", 'pipeline = "train/debug.py:pipeline"\n')
    monkeypatch.chdir(tmp_path / "app" / "train")
    assert _configured_spec(None) == "app/train/debug.py:pipeline"
    (tmp_path / "app" / "pyproject.toml").write_text('[tool.signalchain]\nhf_musicgen = "m"\ndata = ["d"]\n')
    with pytest.raises(UsageError, match="no commit changes"):
        _configured_spec(None)
