"""The profile judges on synthetic records: each fires on its pattern and stays silent beside it."""

from __future__ import annotations

from signalchain.checks.profile import (
    EXPENSIVE_MS,
    EXPENSIVE_SHARE,
    MEMORY_SHARE,
    busy_steps,
    excess_bytes,
    judge_profile,
)
from signalchain.records.profile import BACKWARD, DATA, LOADER, MODEL, OPTIMIZER, OpTime, StageCost, StepProfile

MB = 1 << 20


def _rep(*stages: StageCost, step_ms: float = 400.0) -> StepProfile:
    return StepProfile(list(stages), step_ms, 2, "cpu", "test", "loader")


def _clean() -> list[StageCost]:
    return [StageCost("loader", LOADER, 100, 0.25), StageCost("audio.resampled", DATA, 30, 0.075),
            StageCost("tokens", DATA, 25, 0.0625),
            StageCost("targets", MODEL, 60, 0.15, peak=27 * MB, kept=24 * MB, peak_level=28 * MB, value_bytes=26_000),
            StageCost("loss", MODEL, 5, 0.0125, peak=3 * MB, kept=3 * MB, peak_level=32 * MB),
            StageCost("backward", BACKWARD, 160, 0.4, peak=7 * MB, peak_level=39 * MB),
            StageCost("optimizer", OPTIMIZER, 20, 0.05, peak=1 * MB, peak_level=14 * MB)]


def _ids(rep: StepProfile) -> list[tuple[str, str | None]]:
    return [(f.id, f.stage) for f in judge_profile(rep) if f.id != "perf.profile"]


def test_a_clean_profile_has_only_the_info_summary() -> None:
    out = judge_profile(_rep(*_clean()))
    assert [f.id for f in out] == ["perf.profile"]
    assert out[0].severity.value == "info" and out[0].stage == "backward"  # the stage where memory peaks


def test_an_expensive_data_stage_is_a_warning_naming_its_operators_and_lines() -> None:
    stages = _clean()
    stages[2] = StageCost("tokens", DATA, 600, 0.6, ops=[OpTime("aten::convolution", 500, 5, "/u/codec.py:71")],
                          lines={"/u/codec.py:71": 0.9})
    out = [f for f in judge_profile(_rep(*stages, step_ms=1000)) if f.id == "perf.expensive_stage"]
    assert [(f.stage, f.severity.value) for f in out] == [("tokens", "warning")]
    assert "60%" in out[0].message and "/u/codec.py:71" in out[0].message
    assert "cache the tokens" in out[0].hint


def test_expensive_share_needs_both_the_share_and_the_floor() -> None:
    tiny = StageCost("audio.resampled", DATA, EXPENSIVE_MS / 2, 0.9)  # most of a 5 ms step
    assert _ids(_rep(tiny, step_ms=EXPENSIVE_MS / 1.8)) == []
    below = StageCost("audio.resampled", DATA, 90, EXPENSIVE_SHARE * 0.9)
    assert _ids(_rep(below)) == []
    at = StageCost("audio.resampled", DATA, 90, EXPENSIVE_SHARE)
    assert _ids(_rep(at)) == [("perf.expensive_stage", "audio.resampled")]


def test_model_backward_and_loader_time_is_never_an_expensive_stage() -> None:
    stages = [StageCost("loader", LOADER, 500, 0.5), StageCost("targets", MODEL, 300, 0.3),
              StageCost("backward", BACKWARD, 200, 0.2)]
    assert _ids(_rep(*stages, step_ms=1000)) == []


def test_a_data_stage_that_materialises_a_dense_mask_is_a_memory_peak() -> None:
    stages = _clean()
    stages.insert(3, StageCost("mask.padding", DATA, 1, 0.0, peak=20 * MB, kept=20 * MB, peak_level=20 * MB,
                               value_bytes=800, input_bytes=26_000,
                               ops=[OpTime("aten::fill_", 3, 1, "/u/step.py:9", "[[8, 4, 400, 400]]")]))
    out = [f for f in judge_profile(_rep(*stages)) if f.id == "perf.memory_peak"]
    assert [(f.stage, f.severity.value) for f in out] == [("mask.padding", "warning")]
    assert "[8, 4, 400, 400]" in out[0].message and "/u/step.py:9" in out[0].message


def test_a_model_stage_keeping_its_activations_is_not_a_memory_peak_but_its_transients_are() -> None:
    kept = StageCost("targets", MODEL, 60, 0.15, peak=30 * MB, kept=29 * MB, peak_level=30 * MB)
    assert excess_bytes(kept) == 1 * MB and _ids(_rep(kept)) == []
    transient = StageCost("loss", MODEL, 60, 0.15, peak=30 * MB, kept=3 * MB, peak_level=40 * MB)
    assert _ids(_rep(kept, transient)) == [("perf.memory_peak", "loss")]


def test_memory_excess_must_be_large_against_the_stages_own_input_and_output() -> None:
    # a stage that allocates what its large output and input need: 20 MiB for 10 MiB in and 10 MiB out
    big_io = StageCost("audio.resampled", DATA, 5, 0.01, peak=20 * MB, kept=10 * MB, peak_level=20 * MB,
                       value_bytes=10 * MB, input_bytes=10 * MB)
    assert _ids(_rep(big_io)) == []


def test_memory_excess_must_be_a_share_of_the_steps_peak() -> None:
    step = StageCost("backward", BACKWARD, 100, 0.5, peak=100 * MB, peak_level=100 * MB)
    small = StageCost("mask.padding", DATA, 1, 0.0, peak=int(MEMORY_SHARE * 0.8 * 100 * MB), peak_level=10 * MB)
    assert _ids(_rep(step, small)) == []
    large = StageCost("mask.padding", DATA, 1, 0.0, peak=int(MEMORY_SHARE * 1.5 * 100 * MB), peak_level=10 * MB)
    assert _ids(_rep(step, large)) == [("perf.memory_peak", "mask.padding")]


def test_profile_findings_are_never_errors() -> None:
    stages = [StageCost("tokens", DATA, 900, 0.9, peak=500 * MB, peak_level=500 * MB)]
    assert {f.severity.value for f in judge_profile(_rep(*stages, step_ms=1000))} <= {"warning", "info"}


def test_an_empty_profile_judges_nothing() -> None:
    assert judge_profile(_rep()) == []


def test_a_memory_peak_names_the_likely_cause_from_its_operators() -> None:
    conv = StageCost("tokens", DATA, 1, 0.0, peak=50 * MB, peak_level=50 * MB,
                     ops=[OpTime("aten::mkldnn_convolution", 5, 5, "/u/codec.py:3")])
    mask = StageCost("mask.padding", DATA, 1, 0.0, peak=50 * MB, peak_level=50 * MB,
                     ops=[OpTime("aten::fill_", 1, 1, "/u/step.py:9")])
    hints = {f.stage: f.hint for f in judge_profile(_rep(conv, mask)) if f.id == "perf.memory_peak"}
    assert "cache its output" in hints["tokens"] and "bool [B, T] padding mask" in hints["mask.padding"]


def _steps(data_ms: list[float], step_ms: list[float]) -> StepProfile:
    """A profile whose `audio.resampled` window and step took these busy ms on each profiled step."""
    n = len(step_ms)
    data = StageCost("audio.resampled", DATA, sum(data_ms) / n, sum(d / t for d, t in zip(data_ms, step_ms)) / n,
                     busy_ms=data_ms)
    rest = StageCost("backward", BACKWARD, sum(t - d for d, t in zip(data_ms, step_ms)) / n, 0.5,
                     busy_ms=[t - d for d, t in zip(data_ms, step_ms)])
    return StepProfile([data, rest], sum(step_ms) / n, n, "cpu", "test", "loader", busy_ms=step_ms)


def test_one_noisy_step_does_not_make_a_stage_expensive() -> None:
    # step 0: a busy machine stretched the data stage to 70 % of the step; steps 1 and 2: 12 %
    rep = _steps([700.0, 12.0, 12.0], [1000.0, 100.0, 100.0])
    assert rep.stages[0].share >= EXPENSIVE_SHARE  # its mean share is over the threshold
    assert _ids(rep) == []


def test_a_stage_expensive_on_every_step_is_a_finding_with_its_shares_per_step() -> None:
    rep = _steps([40.0, 60.0, 45.0], [100.0, 120.0, 100.0])
    out = [f for f in judge_profile(rep) if f.id == "perf.expensive_stage"]
    assert [f.stage for f in out] == ["audio.resampled"]
    assert out[0].evidence["step_shares"] == [0.4, 0.5, 0.45] and out[0].evidence["min_share"] == 0.4
    assert "takes 40%-50% of the step on each of 3 profiled steps (mean 45%" in out[0].message


def test_the_ms_floor_holds_on_every_step_too() -> None:
    rep = _steps([EXPENSIVE_MS * 3, EXPENSIVE_MS / 2], [EXPENSIVE_MS * 4, EXPENSIVE_MS])
    assert _ids(rep) == []  # 50 % of each step, but one step's window is under the floor


def test_a_step_whose_thread_queued_for_a_cpu_is_taken_out_not_dropped_and_the_summary_says_so() -> None:
    # the busy ms are the steps' own time (the step thread's run-queue delay already out): a step that
    # queued for a CPU 40 % of its wall time and more is judged like any other, and named in the summary
    rep = _steps([700.0, 60.0], [1000.0, 100.0])
    rep.wall_ms, rep.queued_ms, rep.delay_ms = [2000.0, 101.0], [1000.0, 1.0], 500.5
    out = judge_profile(rep)
    [f] = [f for f in out if f.id == "perf.expensive_stage"]
    assert f.evidence["step_shares"] == [0.7, 0.6] and busy_steps(rep) == [0]
    [s] = [f for f in out if f.id == "perf.profile"]
    assert "1 of 2 steps over 40%" in s.message and "taken out of every share" in s.message
    assert s.evidence["busy_steps"] == [0]


def test_the_other_threads_queueing_bounds_the_share_and_an_open_verdict_is_said() -> None:
    rep = _steps([400.0, 450.0], [1000.0, 1000.0])  # 40-45 % of each step on its estimate
    rep.others_ms = [50.0, 60.0]  # the pool threads queued: 35-39 % on the lower bound, still over
    assert _ids(rep) == [("perf.expensive_stage", "audio.resampled")]
    rep.others_ms = [150.0, 160.0]  # 25-29 %: it could be either
    assert _ids(rep) == []
    [s] = judge_profile(rep)
    assert s.evidence["not_judged"] == ["audio.resampled"] and "OMP_NUM_THREADS=1" in s.message


def _codec(ms: float, numel: int, input_numel: int, **memory: int) -> StageCost:
    return StageCost("tokens", DATA, ms, ms / 1000, busy_ms=[ms, ms], frozen_ms=0.9 * ms, frozen_numel=numel,
                     input_numel=input_numel, ops=[OpTime("aten::mkldnn_convolution", ms, 5, "/u/codec.py:3")],
                     **memory)


def _with(stage: StageCost) -> StepProfile:
    rest = StageCost("backward", BACKWARD, 1000 - stage.ms, 0.5, busy_ms=[1000 - stage.ms] * 2,
                     peak=4 * MB, peak_level=4 * MB)
    return StepProfile([stage, rest], 1000.0, 2, "cpu", "test", "loader", busy_ms=[1000.0, 1000.0])


def test_a_frozen_network_on_its_stages_own_input_is_an_info_and_on_more_a_warning() -> None:
    own = [f for f in judge_profile(_with(_codec(450.0, 64_000, 64_000))) if f.id == "perf.expensive_stage"]
    assert [(f.stage, f.severity.value) for f in own] == [("tokens", "info")] and own[0].evidence["convention"]
    whole = [f for f in judge_profile(_with(_codec(450.0, 256_000, 64_000))) if f.id == "perf.expensive_stage"]
    assert [(f.stage, f.severity.value) for f in whole] == [("tokens", "warning")] and "4.0×" in whole[0].message
    unknown = [f for f in judge_profile(_with(_codec(450.0, 64_000, 0))) if f.id == "perf.expensive_stage"]
    assert [f.severity.value for f in unknown] == ["warning"]  # no input tapped: nothing says it is the convention


def test_a_peak_inside_a_networks_forward_is_its_working_memory_unless_the_stage_holds_it() -> None:
    scratch = dict(peak=40 * MB, kept=0, peak_level=40 * MB, value_bytes=4_000, input_bytes=256_000)
    out = [f for f in judge_profile(_with(_codec(5.0, 64_000, 64_000, peak_in_net=True, **scratch)))
           if f.id == "perf.memory_peak"]
    assert [(f.stage, f.severity.value) for f in out] == [("tokens", "info")] and "not a leak" in out[0].message
    held = {**scratch, "kept": 30 * MB}
    out = [f for f in judge_profile(_with(_codec(5.0, 64_000, 64_000, peak_in_net=True, **held)))
           if f.id == "perf.memory_peak"]
    assert [f.severity.value for f in out] == ["warning"]
    out = [f for f in judge_profile(_with(_codec(5.0, 64_000, 64_000, **scratch))) if f.id == "perf.memory_peak"]
    assert [f.severity.value for f in out] == ["warning"]  # outside any network: the step's own allocation
