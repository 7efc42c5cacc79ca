"""The compile judge on hand-made records: recompiling per update fires at the varying stage, the
normal compilations (the first, one dynamic-shape recompilation) stay silent, graph breaks are info,
and nothing compiled is said as info, never as health."""

from __future__ import annotations

import pytest

from signalchain.checks.compile import guard_kind, judge_compile, varying_stage
from signalchain.records.compile import Compilation, CompileRecord, GraphBreakSeen

WHERE = "/home/u/project/model.py:40"
ORDER = ["audio.original", "caption", "crop", "audio.cropped", "tokens", "condition.tokens", "condition.embedding",
         "logits", "loss"]


def _shapes(steps: int, varying: bool) -> dict[str, list[list[int] | None]]:
    frames = [50, 61, 72, 45, 80, 66, 58, 70][:steps]
    return {
        "audio.original": [[8, 2, 1000 + 37 * i] for i in range(steps)],  # batch max length: varies anyway
        "caption": [None] * steps,
        "crop": [[8, 2]] * steps,
        "audio.cropped": [[8, 1, 320 * (f if varying else 50)] for f in frames],
        "tokens": [[8, 4, f if varying else 50] for f in frames],
        "condition.tokens": [[8, 24]] * steps,
        "condition.embedding": [[8, 24, 64]] * steps,
        "logits": [[8, 4, f if varying else 50, 32] for f in frames],
        "loss": [[]] * steps,
    }


def _record(compile_steps: list[int], steps: int = 6, varying: bool = True, reason: str | None = None,
            failed_at: int | None = None) -> CompileRecord:
    def guard(i: int) -> str:
        return reason or f"tensor 'x' size mismatch at index 2. expected {50 + i}, actual {51 + i}"

    comps = [Compilation(step=s, function="forward", location=WHERE, after_stage="condition.embedding",
                         reason=None if i == 0 else guard(i),
                         failed="Unsupported: Dynamo recompile limit exceeded" if s == failed_at else None)
             for i, s in enumerate(compile_steps)]
    return CompileRecord(steps=steps, compilations=comps, shapes=_shapes(steps, varying), order=list(ORDER))


def test_a_new_graph_on_every_update_is_a_recompile_warning_at_the_first_varying_stage() -> None:
    found = judge_compile(_record([0, 1, 2, 3, 4, 5]))
    assert [f.id for f in found] == ["perf.recompile"]
    f = found[0]
    assert f.severity.value == "warning" and f.stage == "audio.cropped"
    assert f.evidence["compilations"] == 6 and f.evidence["steps_compiled"] == [0, 1, 2, 3, 4, 5]
    assert f.evidence["guard_kind"] == "shape" and "size mismatch at index 2" in f.message
    assert "model.py:40" in f.message and "mark_dynamic" in f.hint and "dynamic=True" in f.hint


@pytest.mark.parametrize("steps_compiled", [[0], [0, 1], [0, 1, 4]])
def test_the_first_compilation_and_a_dynamic_shape_recompilation_are_normal(steps_compiled: list[int]) -> None:
    assert judge_compile(_record(steps_compiled)) == []


def test_recompiling_on_a_minority_of_updates_is_not_per_step() -> None:
    assert judge_compile(_record([0, 2, 5], steps=8)) == []
    assert [f.id for f in judge_compile(_record([0, 2, 4, 5, 6], steps=8))] == ["perf.recompile"]


def test_hitting_the_recompile_limit_fires_even_late() -> None:
    f = judge_compile(_record([0, 5], failed_at=5))[0]
    assert f.id == "perf.recompile" and f.evidence["gave_up"] is True
    assert "eagerly" in f.message and "recompile_limit" in f.hint


def test_a_python_value_guard_has_no_varying_stage_and_its_own_fix() -> None:
    f = judge_compile(_record([0, 1, 2, 3], varying=False, reason="L['scale'] == 0.5"))[0]
    assert f.stage is None and f.evidence["guard_kind"] == "Python value"
    assert "tensor" in f.hint and "mark_dynamic" not in f.hint


@pytest.mark.parametrize("reason, kind", [
    ("tensor 'sequence' size mismatch at index 2. expected 62, actual 93", "shape"),
    ("tensor 'x' dtype mismatch. expected Float, actual BFloat16", "dtype"),
    ("___check_obj_id(L['self'], 140000)", "object identity"),
    ("L['n'] == 100", "Python value"),
    ("something new", "other"),
])
def test_guard_kinds_follow_dynamos_words(reason: str, kind: str) -> None:
    assert guard_kind(reason) == kind


def test_the_varying_stage_walks_back_from_the_compiled_call_over_fixed_stages() -> None:
    rec = _record([0, 1, 2])
    assert varying_stage(rec, "condition.embedding") == "audio.cropped"  # crop's [B, 2] ends the run
    assert varying_stage(rec, "audio.original") == "audio.original"
    assert varying_stage(rec, "not tapped") is None
    assert varying_stage(_record([0, 1, 2], varying=False), "condition.embedding") == "audio.original"


def test_graph_breaks_are_info_with_reason_and_line() -> None:
    rec = _record([0])
    rec.graph_breaks = [GraphBreakSeen("Unsupported Tensor.item() call", 0, "/home/u/project/model.py:52",
                                       "Explanation: Dynamo does not support tracing `Tensor.item()`")]
    (f,) = judge_compile(rec)
    assert f.id == "perf.graph_break" and f.severity.value == "info"
    assert "Tensor.item()" in f.message and "model.py:52" in f.message and "fullgraph=True" in f.hint


def test_nothing_compiled_or_no_dynamo_is_info_and_never_silent() -> None:
    for rec in (CompileRecord(steps=2), CompileRecord(available=False, why_unavailable="no module")):
        (f,) = judge_compile(rec)
        assert f.id == "perf.not_compiled" and f.severity.value == "info" and "not judged" in f.message


def test_no_record_is_no_verdict() -> None:
    assert judge_compile(None) == []
