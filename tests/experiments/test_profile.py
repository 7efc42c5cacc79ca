"""The profiled replay on the reference: windows in tap order, kinds from what ran, shares that add
up, memory from the profiler, the Chrome trace, and the doctor page's table and bar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import signalchain.experiments.families  # noqa: F401  (registers the families)
from signalchain.experiments.context import Budget, Context
from signalchain.experiments.doctor import FAMILIES, run_family
from signalchain.experiments.profile import profile_steps
from signalchain.records.profile import BACKWARD, DATA, LOADER, MODEL, OPTIMIZER, StepProfile
from signalchain.reference import ReferencePipeline
from signalchain.report.doctor_page import render_doctor


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[StepProfile, Path]:
    path = tmp_path_factory.mktemp("trace") / "step.json"
    return profile_steps(Context(pipeline=ReferencePipeline()), steps=1, trace=str(path)), path


def test_windows_follow_the_taps_with_backward_and_optimizer_last(traced: tuple[StepProfile, Path]) -> None:
    rep, _ = traced
    names = [s.stage for s in rep.stages]
    assert names[0] == "loader" and names[-2:] == ["backward", "optimizer"]
    taps = names[1:-2]
    assert taps[:3] == ["audio.original", "caption", "metadata"] and taps[-1] == "loss.per_codebook"
    assert "grad.norm" not in names  # a tap made after the backward started is no boundary
    assert [s.kind for s in rep.stages][0] == LOADER
    assert {s.kind for s in rep.stages[-2:]} == {BACKWARD, OPTIMIZER}


def test_data_preparation_ends_where_the_model_first_runs(traced: tuple[StepProfile, Path]) -> None:
    rep, _ = traced
    kinds = {s.stage: s.kind for s in rep.stages}
    # the reference's codec is numpy and its tokenizer plain Python: both before the model
    assert kinds["audio.resampled"] == kinds["tokens"] == kinds["condition.tokens"] == DATA
    assert kinds["condition.embedding"] == kinds["loss"] == MODEL  # the text encoder is the model's
    seen_model = False
    for s in rep.stages[1:-2]:
        seen_model |= s.kind == MODEL
        assert not (seen_model and s.kind == DATA), "a data stage after the model ran"


def test_shares_add_up_and_memory_comes_from_the_profiler(traced: tuple[StepProfile, Path]) -> None:
    rep, _ = traced
    assert sum(s.share for s in rep.stages) == pytest.approx(1.0, abs=0.01)
    assert rep.stage("backward").op_ms > 0 and rep.stage("backward").allocated > 0  # type: ignore[union-attr]
    forward = max(rep.stages, key=lambda s: s.peak if s.kind == MODEL else -1)
    assert forward.peak > forward.value_bytes  # activations: the profiler's [memory] events were read
    assert rep.stage("loss").value_bytes == 4  # type: ignore[union-attr]  # a float32 scalar
    assert rep.plain_ms is not None and rep.plain_ms > 0


def test_operators_carry_the_users_call_site(traced: tuple[StepProfile, Path]) -> None:
    rep, _ = traced
    sites = [o.site for s in rep.stages if s.kind in (MODEL, BACKWARD) for o in s.ops if o.site]
    assert sites and all("/reference/" in site and ":" in site for site in sites)


def test_the_chrome_trace_is_written_and_holds_the_step(traced: tuple[StepProfile, Path]) -> None:
    rep, path = traced
    assert rep.trace_path == str(path)
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("name") == "signalchain.step" for e in events)


def test_the_doctor_page_shows_the_stage_table_and_the_time_bar(tmp_path: Path) -> None:
    ctx = Context(pipeline=ReferencePipeline(), budget=Budget("economy"))  # one profiled step
    findings = run_family(FAMILIES["profile"], ctx)
    assert ctx.metrics["profile.stages"]["kind"] == "table"
    assert ctx.metrics["profile.time"]["kind"] == "bars"
    page = render_doctor(findings, ctx.metrics, ["profile"], [], {}, "reference").write(tmp_path / "d.html")
    html = Path(page).read_text()
    assert "Step time and memory by stage" in html
    assert "Where a step" in html and "time goes, by stage" in html
    assert "audio.resampled" in html and "backward" in html


def test_without_a_module_call_the_stage_names_decide_what_is_data_preparation() -> None:
    from signalchain.experiments.profile import _windows
    from signalchain.probes.stage_clock import StageClock, TapMark

    clock = StageClock(marks=[TapMark("audio.resampled", 10, 8), TapMark("tokens", 20, 4), TapMark("logits", 30, 16),
                              TapMark("loss", 40, 4), TapMark("grad.norm", 60, 4)])
    backward = [(45, 55, "autograd::engine::evaluate_function: MmBackward0", 1, "")]
    got = [(w[0], w[1], w[2], w[3]) for w in _windows(clock, backward, 0, 5, 70, True)]
    assert got == [("loader", LOADER, 0, 5), ("audio.resampled", DATA, 5, 10), ("tokens", DATA, 10, 20),
                   ("logits", MODEL, 20, 30), ("loss", MODEL, 30, 40), ("backward", BACKWARD, 40, 55),
                   ("optimizer", OPTIMIZER, 55, 70)]
    clock.model_calls.append(15)  # the model ran inside the tokens window: tokens is the model's
    assert [w[1] for w in _windows(clock, backward, 0, 5, 70, True)][1:3] == [DATA, MODEL]
