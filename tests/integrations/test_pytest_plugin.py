"""The pytest plugin in a user's project: sessions run with `pytester` on a copy of the toy pipeline.

Works whether or not signalchain is installed with its `pytest11` entry point: the plugin is named
with `-p` only when pytest would not load it by itself (naming it twice is an error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy  # noqa: F401  (in-process sessions restore sys.modules after each run: import the
import pytest
import torch  # noqa: F401   extension modules here, once, so that no run imports them a second time)

import signalchain.experiments.capture  # noqa: F401
import signalchain.report.describe  # noqa: F401

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
MODULE = "signalchain.integrations.pytest_plugin"

USER_TESTS = '''
import os

import torch

from signalchain import StepOutput, tap
from signalchain.testing import assert_matches_golden
from user_toy import ToyPipeline


class HalfPipeline:
    """A float16 stage that HALF_PERTURB scales by (1 + rel), in float16 as a changed kernel would."""

    name = "half"

    def golden_batch(self, seed):
        return torch.linspace(0.5, 2.0, 64)

    def build_model(self, seed):
        return torch.nn.Identity()

    def build_optimizer(self, model):
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    def step(self, model, batch, tap=tap):
        x = tap("features", batch.half())
        tap("features.scaled", x * (1 + float(os.environ.get("HALF_PERTURB", "0"))))
        loss = tap("loss", x.float().mean())
        return StepOutput(loss=loss)


def test_toy(signalchain_golden):
    signalchain_golden(ToyPipeline(os.environ.get("TOY_CHANGE") or None), "golden/toy")


def test_half(signalchain_golden):
    rtol = os.environ.get("HALF_RTOL")
    per_stage = {"features.scaled": (float(rtol), 1e-5)} if rtol else None
    signalchain_golden(HalfPipeline(), "golden/half", per_stage=per_stage)


def test_spec():
    assert_matches_golden("user_toy:ToyPipeline", "golden/spec", seed=int(os.environ.get("TOY_SEED", "0")))
'''


def plugin_args() -> list[str]:
    # In process, a plugin the outer session already imported cannot be assert-rewritten again: that
    # warning is about this test harness, not about what a user's session prints.
    args = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    autoloaded = any(ep.name == "signalchain" for ep in entry_points(group="pytest11"))
    if autoloaded and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return args
    return ["-p", MODULE, *args]


@pytest.fixture
def project(pytester, monkeypatch):
    for var in ("TOY_CHANGE", "HALF_PERTURB", "HALF_RTOL", "TOY_SEED"):
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(user_toy=(TESTS / "toy_pipeline.py").read_text(encoding="utf-8"), test_user=USER_TESTS)

    def run(*args: str, **env: str):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        try:
            return pytester.runpytest(*plugin_args(), *args)
        finally:
            for key in env:
                monkeypatch.delenv(key)

    run.path = pytester.path
    return run


def test_missing_golden_fails_and_says_how_to_create_it(project):
    result = project()
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*no golden batch at */golden/toy (pipeline 'toy', seed 0); goldens are never "
                                 "created silently. Create it on purpose: pytest --signalchain-update*"])
    assert not (project.path / "golden").exists()


@pytest.mark.slow
def test_update_then_unchanged_then_a_changed_stage(project):
    result = project("--signalchain-update")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["signalchain: re-capturing golden batches (--signalchain-update)",
                                 "*signalchain: golden batches written*",
                                 "test_user.py::test_toy: wrote golden */golden/toy (12 stages, seed 0)"])
    assert "warning" not in result.stdout.str().lower()
    assert (project.path / "golden" / "toy" / "manifest.json").is_file()
    project().assert_outcomes(passed=3)

    result = project("-k", "toy", TOY_CHANGE="tokens")
    result.assert_outcomes(failed=1, deselected=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "E*AssertionError: golden batch mismatch: first divergent stage 'tokens' (tensor, int64), 5 of 12 stages "
        "differ",
        "E*golden     */golden/toy (seed 0, captured *)",
        "E*pipeline   toy",
        "E*values     1 of 160 differ (0.625%)",
        "E*first at   [[]0, 0, 3]: golden 8 → new 9",
        "E*tolerance  exact (int64)",
        "E*last match audio.cropped",
        "E*downstream targets, logits, loss, audio.decoded",
        "E*Look at the code between 'audio.cropped' and 'tokens'. If the change is intended, refresh the golden: "
        "pytest --signalchain-update*",
    ])
    assert "golden_assert.py" not in out and "_check(" not in out  # signalchain's own frames are hidden

    result = project("-k", "toy", TOY_CHANGE="crop")
    result.stdout.fnmatch_lines(["*first divergent stage 'crop' (tensor, int64)*",
                                 "E*first at   [[]0, 0]: golden 1000 → new 1040"])

    result = project("-k", "toy", "--signalchain-update", TOY_CHANGE="crop")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*wrote golden */golden/toy (12 stages, seed 0); the previous golden differed "
                                 "first at 'crop'"])
    project("-k", "toy", TOY_CHANGE="crop").assert_outcomes(passed=1, deselected=2)


@pytest.mark.slow
def test_float16_stage_uses_its_dtype_default_and_per_stage_overrides(project):
    project("-k", "half", "--signalchain-update").assert_outcomes(passed=1, deselected=2)
    project("-k", "half", HALF_PERTURB="5e-4").assert_outcomes(passed=1, deselected=2)  # within rtol 1e-3
    result = project("-k", "half", HALF_PERTURB="5e-3")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(["*first divergent stage 'features.scaled' (tensor, float16), 1 of 3 stages differ",
                                 "E*max |Δ|    * (max relative 0.00*)",
                                 "E*tolerance  rtol 0.001, atol 1e-05 (float16 default)",
                                 "E*downstream none (every later stage matches)"])
    project("-k", "half", HALF_PERTURB="5e-3", HALF_RTOL="1e-2").assert_outcomes(passed=1, deselected=2)


@pytest.mark.slow
def test_suggested_tolerances_are_stored_read_kept_and_validated(project):
    result = project("-k", "half", "--signalchain-update", "--signalchain-suggest", "3")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*tolerances.json from 3 runs: every stage at its dtype default"])
    path = project.path / "golden" / "half" / "tolerances.json"
    doc = json.loads(path.read_text())
    assert doc["runs"] == 3 and doc["stages"]["features.scaled"] == {"rtol": 1e-3, "atol": 1e-5}

    doc["stages"]["features.scaled"]["rtol"] = 1e-2  # a reviewed, hand-loosened tolerance is honoured
    path.write_text(json.dumps(doc))
    project("-k", "half", HALF_PERTURB="5e-3").assert_outcomes(passed=1, deselected=2)
    result = project("-k", "half", "--signalchain-update")
    result.stdout.fnmatch_lines(["*same as the previous golden; kept the previous tolerances.json"])
    assert json.loads(path.read_text())["stages"]["features.scaled"]["rtol"] == 1e-2

    path.write_text(json.dumps(dict(doc, stages={"features.scaled": {"rtol": -1, "atol": 0}})))
    result = project("-k", "half")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(["E*AssertionError: */golden/half/tolerances.json: field stages.features.scaled.rtol "
                                 "is -1, expected a finite number >= 0"])


@pytest.mark.slow
def test_bad_options_and_targets_are_refused(project):
    result = project("--signalchain-suggest", "3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--signalchain-suggest N needs --signalchain-update*"])
    result = project("--signalchain-update", "--signalchain-suggest", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR

    notes = project.path / "golden" / "spec"
    notes.mkdir(parents=True)
    (notes / "notes.txt").write_text("mine")
    result = project("-k", "spec", "--signalchain-update")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(["*is not empty and not a golden batch*"])
    assert (notes / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_spec_string_and_seed_mismatch(project):
    project("-k", "spec", "--signalchain-update").assert_outcomes(passed=1, deselected=2)
    project("-k", "spec").assert_outcomes(passed=1, deselected=2)
    result = project("-k", "spec", TOY_SEED="1")
    result.stdout.fnmatch_lines(["*was captured with seed 0, this test runs seed 1; pass seed=0, or re-capture*"])


def test_pyproject_declares_the_entry_point():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"signalchain": MODULE}


def test_the_plugin_is_cheap_to_import():
    code = ("import sys; import signalchain.integrations.pytest_plugin as p; "
            "heavy = [m for m in ('torch', 'numpy', 'pydantic', 'safetensors', 'signalchain.golden', "
            "'signalchain.experiments', 'signalchain.report') if m in sys.modules]; "
            "print(heavy, callable(p.assert_matches_golden))")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "[] True", out.stderr
