"""`assert_matches_golden` called directly, outside any plugin session (a plain script or another runner)."""

from __future__ import annotations

import json

import pytest
import torch

from signalchain import Comparison, StepOutput, UsageError, tap
from signalchain.golden import dtype_tolerance
from signalchain.integrations import golden_assert
from signalchain.testing import assert_matches_golden
from toy_pipeline import ToyPipeline


@pytest.fixture(autouse=True)
def no_session(monkeypatch):
    monkeypatch.setattr(golden_assert, "_SESSIONS", [])  # as if pytest had not loaded the plugin


class NoisyPipeline:
    """A float stage that moves from run to run whatever the seed, as nondeterministic GPU kernels do:
    each run adds 0, 1 or 2 × `noise` (a counter shared by every instance, so no two runs in a row agree)."""

    name = "noisy"
    runs = 0

    def __init__(self, noise: float = 3e-5):
        self.noise = noise

    def offset(self) -> float:
        NoisyPipeline.runs += 1
        return self.noise * (NoisyPipeline.runs % 3)

    def golden_batch(self, seed):
        return torch.linspace(-1.0, 1.0, 32)

    def build_model(self, seed):
        return torch.nn.Identity()

    def build_optimizer(self, model):
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    def step(self, model, batch, tap=tap):
        tap("logits", batch + self.offset())
        loss = tap("loss", batch.square().mean())
        return StepOutput(loss=loss)


def test_update_then_compare_then_fail(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match=r"no golden batch at g .*Create it on purpose: "
                                             r"assert_matches_golden\(\.\.\., update=True\)"):
        assert_matches_golden(ToyPipeline(), "g")
    assert assert_matches_golden(ToyPipeline(), "g", update=True) is None
    assert (tmp_path / "g" / "manifest.json").is_file()  # relative to the current folder outside pytest
    result = assert_matches_golden("toy_pipeline:ToyPipeline", "g")
    assert isinstance(result, Comparison) and result.identical
    with pytest.raises(AssertionError, match=r"first divergent stage 'mask.loss' \(tensor, bool\)"):
        assert_matches_golden(ToyPipeline("mask"), "g")
    with pytest.raises(AssertionError, match=r"stage 'loss' \(scalar, float32\).*\n.*\n.*\n.*golden 2.4"):
        assert_matches_golden(ToyPipeline("loss"), "g")
    assert_matches_golden(ToyPipeline("loss"), "g", per_stage={"loss": (1.5, 0)})  # loosened on purpose
    with pytest.raises(UsageError, match=r"per_stage for stage 'tokens', which is tensor of int64"):
        assert_matches_golden(ToyPipeline(), "g", per_stage={"tokens": (1, 1)})
    with pytest.raises(UsageError, match=r"per_stage for stage 'logit', which the golden does not have"):
        assert_matches_golden(ToyPipeline(), "g", update=True, per_stage={"logit": (1, 1)})
    with pytest.raises(UsageError, match=r"suggest=1: give the number of runs to measure"):
        assert_matches_golden(ToyPipeline(), "g", update=True, suggest=1)


def test_a_damaged_golden_fails_with_the_loaders_reason(tmp_path):
    folder = tmp_path / "g"
    assert_matches_golden(ToyPipeline(), folder, update=True)
    manifest = folder / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"seed": 0', '"seed": 1'))
    with pytest.raises(AssertionError, match=r"cannot be used: .*manifest.json: was changed after capture"):
        assert_matches_golden(ToyPipeline(), folder)


def test_suggested_tolerances_cover_nondeterminism_that_defaults_do_not(tmp_path):
    folder = tmp_path / "noisy"
    assert_matches_golden(NoisyPipeline(), folder, update=True)
    with pytest.raises(AssertionError, match=r"first divergent stage 'logits'.*\n(.*\n)*.*float32 default"):
        assert_matches_golden(NoisyPipeline(), folder)

    assert_matches_golden(NoisyPipeline(), folder, update=True, suggest=5, margin=4)
    doc = json.loads((folder / "tolerances.json").read_text())
    assert doc["runs"] == 5 and doc["margin"] == 4
    default = dtype_tolerance("float32")
    assert doc["stages"]["logits"]["atol"] > default.atol  # measured spread × margin
    assert doc["stages"]["loss"] == {"rtol": default.rtol, "atol": default.atol}  # deterministic: the default
    for _ in range(3):
        assert assert_matches_golden(NoisyPipeline(), folder).identical
    with pytest.raises(AssertionError, match=r"'logits'.*\n(.*\n)*.*tolerance  rtol .* \(suggested\)"):
        assert_matches_golden(NoisyPipeline(noise=1e-1), folder)  # a real regression still fails


def test_runs_that_differ_on_an_exact_stage_cannot_be_suggested_for(tmp_path):
    class Flaky(NoisyPipeline):
        def step(self, model, batch, tap=tap):
            tap("tokens", torch.tensor([NoisyPipeline.runs]))
            return super().step(model, batch, tap)

    with pytest.raises(UsageError, match=r"not reproducible at stage\(s\) tokens"):
        assert_matches_golden(Flaky(), tmp_path / "flaky", update=True, suggest=3)
    assert not (tmp_path / "flaky").exists()  # nothing written when the suggestion fails
