"""The verify judge on hand-made records: each id fires on its case and stays silent on the others."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from signalchain.checks.verify import improvement_interval, judge_seed, judge_verify, verdict_of
from signalchain.records.verify import ErrorSeen, Measure, SideRun, VerifyMeasurement

DROP = Measure("overfit_drop", "overfit drop", True)
NONFINITE = Measure("loss_nonfinite", "non-finite loss values", False, 0.0)
GRAD = ErrorSeen("grad.missing", "grad")
FIRST = ErrorSeen("nonfinite.first", "loss")
CAPTION = ErrorSeen("caption.empty", "caption")


def run(seed, errors=(), measure=None, control=(), where=(), failed=None):
    return SideRun(seed, list(errors), list(control), measure, where=list(where), failed=failed)


def verification(before, after, measure=DROP, control=("conditioning",)):
    seeds = [b.seed for b in before]
    return VerifyMeasurement("broken", "fixed", "flat-loss", ["optimisation"], list(control), measure, seeds,
                             before, after)


def ids(m):
    return [f.id for f in judge_verify(m)]


def test_a_real_fix_is_fixed_with_its_evidence():
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], [run(s, [], 0.5 + 0.05 * s) for s in range(3)])
    (f,) = judge_verify(m)
    assert f.id == "verify.fixed" and f.severity.value == "info"
    assert f.evidence["interval"]["mean"] == pytest.approx(0.55)
    assert len(f.evidence["seeds"]) == 3 and f.evidence["seeds"][0]["before_errors"] == ["grad.missing@grad"]
    v = verdict_of(m)
    assert v.verdict == "fixed" and v.tests() == {"failure_gone": True, "control_ok": True, "every_seed": True}


def test_an_error_left_in_place_persists_at_its_stage():
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], [run(s, [GRAD], 0.4) for s in range(3)])
    found = judge_verify(m)
    assert [f.id for f in found] == ["verify.failure_persists"]
    assert found[0].stage == "grad" and "grad.missing@grad" in found[0].message
    assert verdict_of(m).verdict == "failure_persists"


def test_a_hidden_symptom_persists_where_the_measure_still_fails():
    # nan_to_num on the loss: the numerics errors vanish, one loss tap still holds 4 NaN.
    before = [run(s, [FIRST], 5.0, where=["loss", "loss.per_codebook"]) for s in range(3)]
    after = [run(s, [], 4.0, where=["loss.per_codebook"]) for s in range(3)]
    found = judge_verify(verification(before, after, NONFINITE))
    assert [f.id for f in found] == ["verify.failure_persists"]
    assert found[0].stage == "loss.per_codebook" and "hidden" in found[0].message
    assert found[0].evidence["hidden_on"] == [0, 1, 2]


def test_an_error_the_fix_only_downgrades_to_a_warning_at_its_stage_persists():
    # the numerics family's "the loss and the gradients are still finite": the source is still there
    warning = {"id": "nonfinite.first", "severity": "warning", "stage": "loss", "message": "still finite"}
    elsewhere = dict(warning, stage="logits")
    after = [run(s, [], 0.0) for s in range(3)]
    for a in after:
        a.findings = [warning]
    m = verification([run(s, [FIRST], 5.0) for s in range(3)], after, NONFINITE)
    found = judge_verify(m)
    assert [f.id for f in found] == ["verify.failure_persists"] and found[0].stage == "loss"
    for a in after:  # the same id at another stage is not the same failure
        a.findings = [elsewhere]
    assert ids(m) == ["verify.fixed"]


def test_a_measure_already_at_its_goal_on_the_failing_state_does_not_decide():
    # NaN in Adam's state from a checkpoint: the loss taps are finite on both sides; the errors decide
    state = ErrorSeen("nonfinite.optimizer_state", "optimizer")
    m = verification([run(s, [state], 0.0) for s in range(2)], [run(s, [], 0.0) for s in range(2)], NONFINITE)
    assert ids(m) == ["verify.fixed"]
    m = verification([run(s, [state], 0.0) for s in range(2)], [run(s, [state], 0.0) for s in range(2)], NONFINITE)
    assert ids(m) == ["verify.failure_persists"]


def test_a_measure_that_does_not_improve_is_not_a_fix():
    m = verification([run(s, [GRAD], 0.1) for s in range(3)], [run(s, [], 0.05) for s in range(3)])
    assert ids(m) == ["verify.failure_persists"]


def test_a_new_control_error_is_a_regression():
    before = [run(s, [GRAD], 0.0) for s in range(3)]
    after = [run(s, [], 0.5, control=[CAPTION]) for s in range(3)]
    found = judge_verify(verification(before, after))
    assert [f.id for f in found] == ["verify.control_regressed"]
    assert found[0].stage == "caption" and found[0].evidence["regressed"] == ["caption.empty@caption"]
    assert verdict_of(verification(before, after)).tests() == {"failure_gone": True, "control_ok": False,
                                                              "every_seed": True}


def test_a_control_that_already_failed_is_not_a_regression():
    before = [run(s, [GRAD], 0.0, control=[CAPTION]) for s in range(3)]
    after = [run(s, [], 0.5, control=[CAPTION]) for s in range(3)]
    assert ids(verification(before, after)) == ["verify.fixed"]


def test_a_new_error_in_the_symptom_families_is_a_regression_too():
    before = [run(s, [GRAD], 0.0) for s in range(3)]
    after = [run(s, [ErrorSeen("loss.flat", "loss")], 0.5) for s in range(3)]
    assert ids(verification(before, after)) == ["verify.control_regressed"]


def test_a_failing_state_that_does_not_fail_is_not_reproducible():
    m = verification([run(s, [], 0.5) for s in range(3)], [run(s, [], 0.5) for s in range(3)])
    found = judge_verify(m)
    assert [f.id for f in found] == ["verify.not_reproducible"] and found[0].severity.value == "error"
    assert found[0].evidence["missing"] == [0, 1, 2] and verdict_of(m).verdict == "not_reproducible"


def test_a_failure_on_some_seeds_only_is_not_reproducible():
    before = [run(0, [GRAD], 0.0), run(1, [], 0.5), run(2, [GRAD], 0.0)]
    after = [run(s, [], 0.5) for s in range(3)]
    found = judge_verify(verification(before, after))
    assert [f.id for f in found] == ["verify.not_reproducible"] and found[0].evidence["missing"] == [1]
    assert verdict_of(verification(before, after)).tests()["every_seed"] is False


def test_a_verdict_that_changes_with_the_seed_is_not_reproducible():
    before = [run(s, [GRAD], 0.0) for s in range(3)]
    after = [run(0, [], 0.5), run(1, [GRAD], 0.0), run(2, [], 0.5)]
    assert sorted(ids(verification(before, after))) == ["verify.failure_persists", "verify.not_reproducible"]


def test_a_state_that_could_not_run_is_not_fixed():
    before = [run(s, [GRAD], 0.0) for s in range(3)]
    after = [run(s, failed="RuntimeError: boom") for s in range(3)]
    assert "verify.fixed" not in ids(verification(before, after))


def test_one_seed_has_no_interval_and_no_measure_judges_on_errors_alone():
    assert improvement_interval([0.5]) is None
    m = verification([run(0, [GRAD], None)], [run(0, [], None)])
    assert ids(m) == ["verify.fixed"] and verdict_of(m).interval is None


def test_the_interval_is_a_student_t_interval():
    xs = [0.4, 0.5, 0.9]
    i = improvement_interval(xs)
    mean = sum(xs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert (i.mean, i.low, i.high, i.n) == (pytest.approx(mean), pytest.approx(mean - half),
                                           pytest.approx(mean + half), 3)
    assert "2 df" in i.method


def test_lower_is_better_measures_are_signed_so_that_positive_is_better():
    s = judge_seed(run(0, [FIRST], 5.0), run(0, [], 0.0), NONFINITE)
    assert s.improvement == 5.0 and s.measure_ok and s.verdict == "fixed"
