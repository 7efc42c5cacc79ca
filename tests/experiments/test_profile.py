"""The profiled replay on the reference: windows in tap order, kinds from what ran, shares that add
up, memory from the profiler, the Chrome trace, and the doctor page's table and bar; and on a tiny
pipeline with a fake run-queue reader, the time a busy machine adds to one step taken out."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import signalchain.experiments.families  # noqa: F401  (registers the families)
import signalchain.experiments.profile as profile_mod
from signalchain.checks.profile import EXPENSIVE_SHARE, judge_profile
from signalchain.experiments.context import Budget, Context
from signalchain.experiments.doctor import FAMILIES, run_family
from signalchain.experiments.profile import profile_steps
from signalchain.pipeline import StepOutput
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


def test_the_doctor_page_shows_the_stage_table_and_the_stacked_time_bar(tmp_path: Path) -> None:
    ctx = Context(pipeline=ReferencePipeline(), budget=Budget("economy"))  # one profiled step
    findings = run_family(FAMILIES["profile"], ctx)
    assert ctx.metrics["profile.stages"]["kind"] == "table"
    bar = ctx.metrics["profile.time"]
    assert bar["kind"] == "stack"
    # one bar of the step in pipeline order: the table's rows, data preparation a group of its own
    assert [seg[0] for seg in bar["segments"]] == [row[0] for row in ctx.metrics["profile.stages"]["rows"]]
    groups = {seg[0]: seg[2] for seg in bar["segments"]}
    assert groups["tokens"] == groups["audio.resampled"] == "data preparation" != groups["targets"]
    assert groups["loader"] != groups["backward"] != groups["optimizer"] and set(groups.values()) <= set(bar["groups"])
    page = render_doctor(findings, ctx.metrics, ["profile"], [], {}, "reference").write(tmp_path / "d.html")
    html = Path(page).read_text()
    assert "Step time and memory by stage" in html
    assert "Where a step" in html and "stage by stage in pipeline order" in html
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


# ---- a loaded machine: one step stretched by other processes is no expensive stage --------------

SLEEP = 0.3  # seconds a data stage "takes" on the slow steps: far above the tiny model's step


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class SlowPrepPipeline:
    """A tiny pipeline whose `audio.resampled` window lasts SLEEP seconds on the profiled steps in
    `slow`; with `load`, the fake run-queue reader says the window's time was spent waiting for a CPU
    (other processes), as a busy machine's scheduler would. Calls 0 and 1 are the warm-up and the plain
    update; 2 and 3 the profiled ones."""

    name = "slow-prep"

    def __init__(self, slow: set[int], load: bool) -> None:
        self.slow, self.load, self.calls, self.waited, self.other_calls = slow, load, 0, 0.0, 0

    def golden_batch(self, seed: int) -> torch.Tensor:
        return torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return _Tiny()

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model: nn.Module, batch: torch.Tensor, tap: Any) -> StepOutput:
        x = tap("audio.original", batch)
        if self.calls - 2 in self.slow:
            time.sleep(SLEEP)
            if self.load:
                self.waited += SLEEP
        self.calls += 1
        x = tap("audio.resampled", x * 2)
        logits = tap("logits", model(x))
        return StepOutput(loss=tap("loss", logits.pow(2).mean()))


class FakeThreads:
    """The step thread's clock, where the run-queue delay is what the pipeline says it waited (None:
    not readable), and no other thread queued."""

    def __init__(self, p: SlowPrepPipeline, readable: bool, others: float = 0.0) -> None:
        self.p, self.readable, self.exclude, self.queued_others = p, readable, set(), others

    def thread(self) -> tuple[float, float | None]:
        return time.thread_time(), self.p.waited if self.readable else None

    def others(self) -> float | None:
        self.p.other_calls += 1
        return self.queued_others * (self.p.other_calls // 2) if self.readable else None

    def close(self) -> None:
        pass


def _slow_profile(monkeypatch: pytest.MonkeyPatch, slow: set[int], load: bool,
                  readable: bool = True, others: float = 0.0) -> tuple[StepProfile, list[Any]]:
    p = SlowPrepPipeline(slow, load)
    monkeypatch.setattr(profile_mod, "ThreadClock", lambda: FakeThreads(p, readable, others))
    rep = profile_steps(Context(pipeline=p), steps=2)
    return rep, [f for f in judge_profile(rep) if f.id == "perf.expensive_stage"]


def test_one_step_stretched_by_a_busy_machine_is_taken_out_and_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _slow_profile(monkeypatch, {0}, load=True)
    s = rep.stage("audio.resampled")
    assert s is not None and s.kind == DATA
    assert s.delay_ms == pytest.approx(SLEEP * 1000 / 2, rel=1e-6)  # the fake's wait, all in its window
    assert rep.delay_ms is not None and rep.delay_ms >= s.delay_ms
    assert s.busy_ms[0] <= s.ms * 2 - SLEEP * 1000 * 0.999  # the noisy step's window less the wait
    assert s.wall_share >= EXPENSIVE_SHARE  # the wall-clock mean alone would have named it (an old rule)
    # what is left of the window is the tiny step's own work: its share of a tiny step is whatever the
    # machine made it (not asserted), its time is far below what the judge names
    assert max(s.busy_ms) < 0.5 * SLEEP * 1000
    assert found == []


def test_one_noisy_step_is_not_enough_even_where_the_cpu_wait_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _slow_profile(monkeypatch, {0}, load=False, readable=False)
    s = rep.stage("audio.resampled")
    assert s is not None and rep.delay_ms is None and s.delay_ms == 0.0
    assert len(s.busy_ms) == len(rep.busy_ms) == 2 and s.busy_ms[0] >= SLEEP * 1000
    assert s.share >= EXPENSIVE_SHARE and found == []  # the mean is high, the step that was not slow is not


def test_a_stage_expensive_on_every_step_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _slow_profile(monkeypatch, {0, 1}, load=False)
    assert [f.stage for f in found] == ["audio.resampled"]
    ev = found[0].evidence
    assert len(ev["step_shares"]) == 2 and ev["min_share"] >= EXPENSIVE_SHARE
    assert "on each of 2 profiled steps" in found[0].message


def test_a_stage_slow_on_every_step_only_from_load_is_not_named(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _slow_profile(monkeypatch, {0, 1}, load=True)
    assert rep.stage("audio.resampled").delay_ms == pytest.approx(SLEEP * 1000, rel=1e-6)  # type: ignore[union-attr]
    assert found == []


def test_a_stage_expensive_only_if_its_pool_threads_queued_for_nothing_is_withheld_with_what_to_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's data stage takes SLEEP, but the process's other threads queued SLEEP too: the step
    may have waited for them, so the share is known only to lie in [0, 1]: not judged, and said so."""
    rep, found = _slow_profile(monkeypatch, {0, 1}, load=False, others=SLEEP)
    assert rep.others_ms and min(rep.others_ms) == pytest.approx(SLEEP * 1000)
    assert found == []
    [summary] = [f for f in judge_profile(rep) if f.id == "perf.profile"]
    assert summary.evidence["not_judged"] == ["audio.resampled"] and "set_num_threads(1)" in summary.message


@pytest.mark.parametrize("others", [SLEEP, 0.0])
def test_a_replay_whose_pool_threads_queued_runs_again_on_one_thread(monkeypatch: pytest.MonkeyPatch,
                                                                     others: float) -> None:
    """With two intra-op threads and the other threads queued for much of the replay, the doctor's
    profile is the replay on one thread, said so; with nothing queued, the first replay is kept."""
    from signalchain.experiments.profile import measure_profile

    p = SlowPrepPipeline(set(), load=False)
    threads = [2]
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads[-1])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.append(n))
    monkeypatch.setattr(profile_mod, "ThreadClock", lambda: FakeThreads(p, True, others))
    rep = measure_profile(Context(pipeline=p))
    summary = next(f for f in judge_profile(rep) if f.id == "perf.profile")
    if others:
        assert threads == [2, 1, 2]  # one thread for the second replay, the user's count restored
        assert rep.threads == 1 and rep.pool_queued_share is not None and rep.pool_queued_share >= 0.1
        assert "replay on 1 intra-op thread" in summary.message
    else:
        assert threads == [2] and rep.threads == 2 and rep.pool_queued_share is None
        assert "intra-op thread" not in summary.message


# ---- a frozen network inside the step: the on-the-fly convention, and work thrown away ----------

BIG = 16 << 20  # bytes of a frozen network's scratch: far above the tiny step's own memory


class _Frozen(nn.Module):
    """A frozen 'codec': a conv whose forward takes SLEEP (a large encoder) and, with `scratch`, BIG
    bytes of working memory, freed when it returns."""

    def __init__(self, scratch: bool) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 3, padding=1).requires_grad_(False)
        self.scratch = scratch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP)
        if self.scratch:
            work = torch.ones(BIG // 4)
            x = x + work[:1].sum() * 0
            del work
        return self.conv(x)


class FrozenPrepPipeline(SlowPrepPipeline):
    """Crops its audio, then encodes with a frozen network: the crop (`whole=False`) or the whole clip
    four times longer (`whole=True`), as a codec run before the crop would."""

    name = "frozen-prep"

    def __init__(self, whole: bool = False, scratch: bool = False, keep: bool = False) -> None:
        super().__init__(set(), False)
        self.encoder, self.whole, self.keep, self.kept = _Frozen(scratch), whole, keep, None

    def golden_batch(self, seed: int) -> torch.Tensor:
        return torch.randn(4, 1, 64, generator=torch.Generator().manual_seed(seed))

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.Linear(8 * 16, 8)

    def step(self, model: nn.Module, batch: torch.Tensor, tap: Any) -> StepOutput:
        x = tap("audio.original", batch)
        crop = tap("audio.cropped", x[..., :16].contiguous())
        with torch.no_grad():
            codes = self.encoder(x if self.whole else crop)[..., :16]
            if self.keep:  # a dense buffer built next to the codec and kept: the user's, not the network's
                self.kept = torch.ones(BIG // 4)
        codes = tap("tokens", codes)
        logits = tap("logits", model(codes.reshape(codes.shape[0], -1)))
        return StepOutput(loss=tap("loss", logits.pow(2).mean()))


def _frozen_findings(monkeypatch: pytest.MonkeyPatch, **kw: bool) -> tuple[StepProfile, list[Any]]:
    p = FrozenPrepPipeline(**kw)
    monkeypatch.setattr(profile_mod, "ThreadClock", lambda: FakeThreads(p, True))
    rep = profile_steps(Context(pipeline=p), steps=2)
    return rep, [f for f in judge_profile(rep) if f.id in ("perf.expensive_stage", "perf.memory_peak")]


def test_a_frozen_codec_on_the_stages_own_input_is_the_convention_not_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _frozen_findings(monkeypatch, scratch=True)
    tokens = rep.stage("tokens")
    assert tokens is not None and tokens.kind == DATA and tokens.frozen_ms >= 0.9 * SLEEP * 1000
    assert tokens.frozen_numel == tokens.input_numel == 4 * 16 and tokens.peak_in_net
    assert sorted((f.id, f.stage, f.severity.value) for f in found) == [
        ("perf.expensive_stage", "tokens", "info"), ("perf.memory_peak", "tokens", "info")]
    [slow] = [f for f in found if f.id == "perf.expensive_stage"]
    assert slow.evidence["convention"] and "cache codec tokens" in slow.hint


def test_a_frozen_codec_on_more_than_its_stage_was_given_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _frozen_findings(monkeypatch, whole=True)
    tokens = rep.stage("tokens")
    assert tokens is not None and tokens.frozen_numel == 4 * tokens.input_numel
    [slow] = [f for f in found if f.id == "perf.expensive_stage"]
    assert (slow.stage, slow.severity.value) == ("tokens", "warning") and "drops" in slow.message


def test_memory_a_stage_keeps_beside_a_frozen_network_is_still_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    rep, found = _frozen_findings(monkeypatch, keep=True)
    assert [(f.id, f.stage, f.severity.value) for f in found if f.id == "perf.memory_peak"] == [
        ("perf.memory_peak", "tokens", "warning")]
