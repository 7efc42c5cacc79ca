"""The doctor's one runner: declared steps, their capability checks, crash guards, named results,
pictures and the declared order of the families."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from signalchain.checks.base import make
from signalchain.experiments.context import BUDGETS, KNOBS, Budget, Context
from signalchain.experiments.doctor import (
    FAMILY,
    PRIOR,
    SELF,
    Family,
    Step,
    check_name,
    family_order,
    judge,
    ordered_steps,
    run_family,
)
from signalchain.findings import exit_code
from signalchain.records.figures import Audio, Bars, Curves, Stack, Table, Text

FAMILIES_DIR = Path(__file__).parents[2] / "src" / "signalchain" / "experiments" / "families"


class Bare:
    """A pipeline with no optional capability but `loader`."""

    name = "bare"

    def loader(self, split):
        return iter(())


def _ctx() -> Context:
    return Context(Bare(), budget=BUDGETS["economy"])


def found(record):
    return [make("test.found", "warning", None, f"saw {record}", "tests")]


def boom(ctx):
    raise ValueError("measure went wrong")


def crashing_judge(record):
    raise KeyError("judge went wrong")


def test_a_crashing_measure_becomes_a_finding_and_the_next_steps_run():
    fam = Family("t", "test", steps=(
        Step("first", measure=boom, judges=(found,)),
        Step("second", measure=lambda ctx: 2, judges=(found,)),
    ))
    ctx = _ctx()
    out = run_family(fam, ctx)
    crash = out[0]
    assert crash.id in ("pipeline.step_failed", "internal.check_failed")
    assert "measure went wrong" in crash.message and "t.first" in crash.message
    assert [f.message for f in out[1:]] == ["saw 2"]  # the first step's judge did not run on nothing
    assert ctx.result("t.first") is None and ctx.result("t.second") == 2
    assert set(ctx.timings) == {"t.first", "t.second"}


def test_a_crash_in_a_step_that_is_not_isolated_ends_the_family():
    fam = Family("t", "test", steps=(Step("first", measure=boom, isolated=False), Step("second", judges=(found,))))
    with pytest.raises(ValueError, match="measure went wrong"):
        run_family(fam, _ctx())


def test_a_missing_capability_skips_the_step_with_the_capability_finding():
    ran = []
    fam = Family("t", "test", steps=(
        Step("gen", needs=("generate",), needed_by="checks.t.gen", measure=lambda ctx: ran.append("gen")),
        Step("quiet", needs=("render|generate+decode",), measure=lambda ctx: ran.append("quiet")),
        Step("either", needs=("generate|loader",), measure=lambda ctx: ran.append("either") or 1),
    ))
    out = run_family(fam, _ctx())
    assert ran == ["either"]
    assert [(f.id, f.evidence["capability"], f.check) for f in out] == [
        ("pipeline.capability_missing", "generate", "checks.t.gen")]
    assert out[0].message == "checks.t.gen did not run: pipeline 'bare' has no generate"


def test_a_family_that_needs_a_missing_capability_runs_no_step():
    fam = Family("t", "test", needs=("amp_dtype|scaler",), needed_by="checks.t", steps=(Step("s", judges=(found,)),))
    out = run_family(fam, _ctx())
    assert [(f.id, f.evidence["capability"]) for f in out] == [("pipeline.capability_missing", "amp_dtype")]


def test_a_crashing_judge_is_named_after_its_function():
    fam = Family("t", "test", steps=(Step("s", measure=lambda ctx: 1, judges=(crashing_judge, found)),))
    out = run_family(fam, _ctx())
    assert out[0].id == "internal.check_failed" and out[0].check == check_name(crashing_judge)
    assert check_name(crashing_judge) == f"{__name__.removeprefix('signalchain.')}.crashing_judge"
    assert out[1].message == "saw 1"  # the other judges go on
    assert out[0].severity.value == "warning" and exit_code(out) == 0  # our crash is no verdict on the run


def test_judges_read_named_results_the_family_and_every_finding_so_far():
    seen = {}

    def reads(record, earlier, mine, everything):
        seen.update(record=record, earlier=earlier, mine=[f.message for f in mine],
                    everything=[f.message for f in everything])
        return []

    ctx = _ctx()
    ctx.findings.append(make("test.before", "info", None, "before", "tests"))
    fam = Family("t", "test", steps=(
        Step("a", measure=lambda ctx: "A", judges=(found,)),
        Step("b", measure=lambda ctx, a: a + "B", reads=("t.a",), when=lambda ctx: ctx.result("t.a") == "A",
             judges=(judge(reads, SELF, "t.a", FAMILY, PRIOR),)),
        Step("never", when=lambda ctx: False, measure=boom),
    ))
    run_family(fam, ctx)
    assert seen == {"record": "AB", "earlier": "A", "mine": ["saw A"], "everything": ["before", "saw A"]}


def test_show_becomes_metrics_and_stop_ends_the_family():
    def show(record):
        return {"t.table": Table("rows", ["a"], [[record]]), "t.raw": {"x": record}}

    ctx = _ctx()
    fam = Family("t", "test", steps=(
        Step("a", measure=lambda ctx: 1, show=show, stop=lambda r: r == 1),
        Step("b", measure=lambda ctx: 2, show=show),
    ))
    run_family(fam, ctx)
    assert ctx.metrics == {"t.table": {"kind": "table", "title": "rows", "headers": ["a"], "rows": [[1]]},
                           "t.raw": {"x": 1}}


def test_the_declared_order_is_the_order_the_families_always_ran_in():
    assert family_order() == ["audio", "data", "numerics", "optimisation", "precision", "conditioning",
                              "generation", "output", "splits", "performance", "compile", "profile"]


def test_steps_run_in_declared_order_unless_after_says_otherwise():
    fam = Family("t", "test", steps=(Step("a", after=("c",)), Step("b"), Step("c"), Step("d", after=("a",))))
    assert [s.name for s in ordered_steps(fam)] == ["b", "c", "a", "d"]
    loop = Family("t", "test", steps=(Step("a", after=("b",)), Step("b", after=("a",))))
    with pytest.raises(RuntimeError, match="wait on each other"):
        ordered_steps(loop)


def test_figures_give_the_dicts_the_report_draws():
    assert Bars("t", {"a": 1.0}, x_label="z", logx=False).to_dict() == {
        "kind": "bars", "title": "t", "values": {"a": 1.0}, "x_label": "z", "logx": False}
    assert Stack("t", [["a", 1.0, "g"]], ["g"], x_label="ms").to_dict() == {
        "kind": "stack", "title": "t", "segments": [["a", 1.0, "g"]], "groups": ["g"], "x_label": "ms"}
    assert Curves("t", {"s": [[0], [1.0]]}, x_label="u", y_label="ms", logy=True).to_dict() == {
        "kind": "curves", "title": "t", "series": {"s": [[0], [1.0]]}, "x_label": "u", "y_label": "ms", "logy": True}
    assert Text("t", "x").to_dict() == {"kind": "text", "title": "t", "text": "x"}
    assert Audio("t", 8000, [{"label": "a"}]).to_dict() == {"kind": "audio", "title": "t", "sample_rate": 8000,
                                                            "clips": [{"label": "a"}]}


def test_budgets_are_presets_of_the_knobs_each_family_declares():
    family_order()  # registers the families and their knobs
    assert len(KNOBS) >= 19
    for name, knob in KNOBS.items():
        assert getattr(BUDGETS["economy"], name) == knob.economy and getattr(BUDGETS["full"], name) == knob.full
    assert BUDGETS["economy"].overfit_steps == 30 and BUDGETS["business"].overfit_steps == 60
    custom = Budget(perf_steps=4)
    assert custom.perf_steps == 4 and custom.overfit_steps == BUDGETS["business"].overfit_steps
    with pytest.raises(TypeError, match="unknown budget knob"):
        Budget(overfit_step=3)
    with pytest.raises(AttributeError):
        custom.perf_steps = 5


def test_no_family_orchestrates_by_hand():
    """The runner owns timing, crash guards and check names: no family module does them itself."""
    for path in FAMILIES_DIR.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"ctx\.timed|ctx\.attempt|run_check|missing_capability", text), path.name


def cannot_judge(record):
    return [make("pipeline.capability_missing", "info", None, "the t family did not run: no `x` tapped", "tests")]


def test_the_step_log_says_what_each_step_judged_and_why_the_others_did_not():
    """`verify` counts a control only through steps that judged a real record (absence is not a pass)."""
    fam = Family("t", "test", steps=(
        Step("judged", measure=lambda ctx: 2, judges=(found,)),
        Step("clean", measure=lambda ctx: 3, judges=(lambda r: [],)),
        Step("gen", needs=("generate",), needed_by="checks.t.gen", measure=lambda ctx: 1, judges=(found,)),
        Step("blind", measure=lambda ctx: 4, judges=(cannot_judge,)),
        Step("nothing", measure=lambda ctx: None, judges=(found,)),
        Step("crash", measure=boom, judges=(found,)),
        Step("unneeded", when=lambda ctx: False, measure=lambda ctx: 5, judges=(found,)),
        Step("feeds", measure=lambda ctx: 6),
        Step("picture", show=lambda r: {}),
    ))
    log: dict = {}
    run_family(fam, _ctx(), log)
    assert {k: v["status"] for k, v in log.items()} == {
        "judged": "judged", "clean": "judged", "gen": "skipped", "blind": "skipped", "nothing": "empty",
        "crash": "crashed", "unneeded": "not needed", "feeds": "measured"}
    assert log["judged"]["ids"] == ["test.found"] and log["clean"]["ids"] == []
    assert log["gen"]["why"] == "no generate" and "no `x` tapped" in log["blind"]["why"]
    assert "measure went wrong" in log["crash"]["why"]
    whole: dict = {}
    run_family(Family("w", "test", needs=("scaler",), steps=(Step("s", judges=(found,)),)), _ctx(), whole)
    assert whole == {"s": {"status": "skipped", "why": "no scaler", "checks": [], "ids": []}}
