"""`compare` re-runs only code the user named, or a module the manifest names - never a file that
came with the golden. A canary module writes a marker file when imported: it must never run."""

import sys

import pytest
from click.testing import CliRunner
from golden_helpers import read_manifest, write_manifest

from signalchain import UsageError
from signalchain.cli import cli
from signalchain.golden import load_manifest_pipeline, manifest_pipeline_spec

TOY = "tests/toy_pipeline.py:make"
BUILTINS = {"reference": "signalchain.reference:ReferencePipeline"}
CANARY = """import pathlib
pathlib.Path({marker!r}).write_text("code from the golden ran")
import sys
sys.path.insert(0, "tests")
from toy_pipeline import ToyPipeline
pipe = ToyPipeline()
def make():
    return pipe
"""


@pytest.fixture
def golden(tmp_path):
    out = tmp_path / "golden"
    res = CliRunner().invoke(cli, ["capture", TOY, "--out", str(out), "--seed", "1"])
    assert res.exit_code == 0, res.output
    return out


def _name_pipeline(golden, spec):
    m = read_manifest(golden)
    m["provenance"]["pipeline_spec"] = spec
    write_manifest(golden, m)  # resealed: a forger's golden, not a hand edit


def _compare(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


def _one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("signalchain: error:"), res.stderr
    assert "Traceback" not in res.output and "first divergent" not in res.output and "identical" not in res.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("form", ["absolute", "relative", "dotted_py", "home"])
def test_a_file_named_by_the_manifest_is_never_run(golden, tmp_path, monkeypatch, form):
    marker = tmp_path / "ran.txt"
    (golden / "evil.py").write_text(CANARY.format(marker=str(marker)))
    monkeypatch.chdir(golden)
    spec = {"absolute": f"{golden}/evil.py:pipe", "relative": "evil.py:pipe", "dotted_py": "./evil.py:make",
            "home": "~/evil.py:pipe"}[form]
    _name_pipeline(golden, spec)
    monkeypatch.syspath_prepend(str(tmp_path.parent))  # so that tests/ resolves from the golden's folder too
    res = _compare(golden)
    _one_line_error(res, "is a file path", "pass --pipeline")
    assert not marker.exists()


@pytest.mark.parametrize("where", ["inside", "beside"])
def test_a_module_planted_inside_or_beside_the_golden_is_never_imported(golden, tmp_path, monkeypatch, where):
    marker = tmp_path / "ran.txt"
    home = golden if where == "inside" else golden.parent
    (home / "evilmod.py").write_text(CANARY.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(home))  # as `python -m signalchain` run from that folder would have it
    _name_pipeline(golden, "evilmod:pipe")
    res = _compare(golden)
    _one_line_error(res, "inside or beside the golden's folder", "pass --pipeline")
    assert not marker.exists() and "evilmod" not in sys.modules


@pytest.mark.parametrize("spec,why", [
    ("os:abort", "standard library"), ("sys:exit", "standard library"), ("antigravity:x", "standard library"),
    ("builtins:exit", "standard library"), ("toy_pipeline:__class__", "not an importable module spec"),
    ("toy_pipeline", "not an importable module spec"), ("toy_pipeline:make:x", "not an importable module spec"),
    ("no_such_module_here:make", "not importable here"), ("--hf-musicgen /models/x", "built from a saved HF MusicGen"),
])
def test_specs_that_are_not_pipelines_are_refused_before_anything_runs(golden, spec, why):
    _name_pipeline(golden, spec)
    _one_line_error(_compare(golden), why, "pass --pipeline")


@pytest.mark.parametrize(
    "attr,why",
    [
        ("np", "neither a pipeline class"),
        ("SR", "neither a pipeline class"),
        ("StepOutput", "a class that is not a Pipeline"),
        ("tap", "neither a pipeline class"),
    ],
)
def test_attributes_that_are_not_pipelines_are_refused_without_calling_them(attr, why):
    with pytest.raises(UsageError, match=why):
        load_manifest_pipeline(f"toy_pipeline:{attr}")


def test_a_module_spec_is_run_and_named(golden, tmp_path):
    _name_pipeline(golden, "toy_pipeline:make")
    res = CliRunner().invoke(cli, ["compare", str(golden), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "re-running pipeline toy_pipeline:make (from the golden's manifest)" in res.output
    assert '"source": "the golden\'s manifest"' in (tmp_path / "r.json").read_text()


def test_a_file_spec_runs_when_the_user_names_it(golden):
    res = _compare(golden, "--pipeline", TOY)
    assert res.exit_code == 0 and f"re-running pipeline {TOY} (from --pipeline)" in res.output


def test_without_pipeline_a_file_spec_is_a_usage_error_saying_to_pass_pipeline(golden):
    _one_line_error(_compare(golden), f"names pipeline '{TOY}', which is a file path", "pass --pipeline SPEC")


def test_a_pipeline_that_exits_does_not_pass_for_a_comparison(golden, tmp_path):
    quitter = tmp_path / "quitter.py"
    quitter.write_text("import sys\nsys.exit(0)\n")
    res = _compare(golden, "--pipeline", f"{quitter}:pipe")
    assert res.exit_code == 2 and "exit" in res.stderr and "identical" not in res.output


def test_builtin_names_and_a_missing_spec_map_to_bundled_pipelines(tmp_path):
    assert manifest_pipeline_spec(None, tmp_path, "d:D", BUILTINS) == "d:D"
    assert manifest_pipeline_spec("reference", tmp_path, "d:D", BUILTINS) == BUILTINS["reference"]
    assert manifest_pipeline_spec(BUILTINS["reference"], tmp_path, "d:D", BUILTINS) == BUILTINS["reference"]
    with pytest.raises(UsageError, match="is not text"):
        manifest_pipeline_spec(["x"], tmp_path, "d:D", BUILTINS)
