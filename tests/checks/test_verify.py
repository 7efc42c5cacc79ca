"""The verify judge on hand-made records: each id fires on its case and stays silent on the others."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from signalchain.checks.verify import failure_rate, improvement_interval, judge_seed, judge_verify, verdict_of
from signalchain.records.verify import ErrorSeen, Measure, SideRun, VerifyMeasurement

DROP = Measure("overfit_drop", "overfit drop", True)
NONFINITE = Measure("loss_nonfinite", "non-finite loss values", False, 0.0)
GRAD = ErrorSeen("grad.missing", "grad")
FIRST = ErrorSeen("nonfinite.first", "loss")
CAPTION = ErrorSeen("caption.empty", "caption")


#: What the doctor's step log says of a control family that looked (`experiments.doctor.run_family`).
LOOKED = {"conditioning": {"captions": {"status": "judged", "why": "", "checks": ["judge_empty"], "ids": []}}}
#: ... and of one that could not: no caption tapped, no loader.
BLIND = {"conditioning": {
    "data": {"status": "skipped", "why": "the conditioning family did not run: the step taps no `caption` stage",
             "checks": ["no_caption"], "ids": []}}}
NO_LOADER = {"conditioning": {"loader": {"status": "skipped", "why": "no loader", "checks": [], "ids": []}}}


def run(seed, errors=(), measure=None, control=(), where=(), failed=None, control_steps=LOOKED, steps=None):
    return SideRun(seed, list(errors), list(control), measure, where=list(where), failed=failed, steps=steps,
                   control_steps=control_steps)


def verification(before, after, measure=DROP, control=("conditioning",), waived=False):
    seeds = [b.seed for b in before]
    return VerifyMeasurement("broken", "fixed", "flat-loss", ["optimisation"], list(control), measure, seeds,
                             before, after, control_waived=waived, alternatives=["numerics", "audio"])


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


def test_the_interval_of_a_continuous_measure_is_a_student_t_interval():
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


# ---- absence is not a pass ----------------------------------------------------------------------------

def test_a_control_that_could_not_run_makes_the_verdict_inconclusive():
    # the issue: --symptom nan on a pipeline with no caption: the conditioning control looked at nothing
    before = [run(s, [FIRST], 1.0) for s in range(2)]
    after = [run(s, [], 0.0, control_steps=BLIND) for s in range(2)]
    m = verification(before, after, NONFINITE)
    (f,) = judge_verify(m)
    assert (f.id, f.severity.value) == ("verify.inconclusive", "warning")
    assert "could not run on the fixed state" in f.message and "taps no `caption` stage" in f.message
    assert "holds" not in f.message and "pass" not in f.message and "fixed:" not in f.message
    assert "--control F (outside the families under test: numerics, audio)" in f.hint and "--control none" in f.hint
    assert f.evidence["control_skipped"] == {"conditioning": {"data": BLIND["conditioning"]["data"]["why"]}}
    v = verdict_of(m)
    assert v.verdict == "inconclusive" and v.tests() == {"failure_gone": True, "control_ok": None, "every_seed": True}
    assert [s.verdict for s in v.seeds] == ["inconclusive", "inconclusive"]


def test_a_control_that_ran_some_steps_is_evidence_and_says_which():
    partial = {"conditioning": {**LOOKED["conditioning"], **NO_LOADER["conditioning"]}}
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], [run(s, [], 0.5, control_steps=partial)
                                                                 for s in range(3)])
    (f,) = judge_verify(m)
    assert f.id == "verify.fixed" and "conditioning judged captions" in f.message
    assert f.evidence["control_judged"] == {"conditioning": ["captions"]}


@pytest.mark.parametrize("steps", [None, {}, NO_LOADER], ids=["not reported", "no family", "only skipped"])
def test_a_control_with_nothing_judged_is_never_a_pass(steps):
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], [run(s, [], 0.5, control_steps=steps)
                                                                 for s in range(3)])
    assert ids(m) == ["verify.inconclusive"]


def test_a_blind_control_on_one_seed_is_enough_to_withhold_the_verdict():
    after = [run(0, [], 0.5), run(1, [], 0.5, control_steps=BLIND), run(2, [], 0.5)]
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], after)
    (f,) = judge_verify(m)
    assert f.id == "verify.inconclusive" and "on seed(s) 1" in f.message


def test_no_control_at_all_is_inconclusive_unless_waived():
    before = [run(s, [GRAD], 0.0, control_steps={}) for s in range(2)]
    after = [run(s, [], 0.5, control_steps={}) for s in range(2)]
    assert ids(verification(before, after, control=())) == ["verify.inconclusive"]
    (f,) = judge_verify(verification(before, after, control=(), waived=True))
    assert f.id == "verify.fixed" and "no control was run (--control none)" in f.message
    assert verdict_of(verification(before, after, control=(), waived=True)).tests()["control_ok"] is None


def test_an_error_whose_step_the_fix_skipped_is_not_shown_gone():
    # the failing state's error came from a step that needs a loader; the fixed state has none
    found = {"data": {"loader": {"status": "judged", "why": "", "checks": ["judge_loader"], "ids": ["loader.repeats"]},
                      "golden": {"status": "judged", "why": "", "checks": ["judge"], "ids": []}}}
    lost = {"data": {"loader": {"status": "skipped", "why": "no loader", "checks": [], "ids": []},
                     "golden": {"status": "judged", "why": "", "checks": ["judge"], "ids": []}}}
    repeats = ErrorSeen("loader.repeats", "loader")
    m = verification([run(s, [repeats], None, steps=found) for s in range(2)],
                     [run(s, [], None, steps=lost) for s in range(2)], NONFINITE)
    (f,) = judge_verify(m)
    assert f.id == "verify.inconclusive" and "loader.repeats@loader" in f.message
    assert verdict_of(m).tests()["failure_gone"] is None
    looked = {"data": {**lost["data"], "loader": found["data"]["loader"] | {"ids": []}}}
    assert ids(verification([run(s, [repeats], None, steps=found) for s in range(2)],
                            [run(s, [], None, steps=looked) for s in range(2)], NONFINITE)) == ["verify.fixed"]


def test_a_definite_failure_is_reported_even_when_the_control_could_not_run():
    m = verification([run(s, [GRAD], 0.0) for s in range(2)], [run(s, [GRAD], 0.0, control_steps=BLIND)
                                                                for s in range(2)])
    assert ids(m) == ["verify.failure_persists"]


# ---- intervals fit their measure --------------------------------------------------------------------------

def test_a_measure_with_a_goal_is_a_0_1_outcome_with_a_binomial_interval():
    # the issue: "95% Student t, 2 seeds (1 df): +1 to +1" on one NaN loss going to none
    m = verification([run(s, [FIRST], 1.0) for s in range(2)], [run(s, [], 0.0) for s in range(2)], NONFINITE)
    v = verdict_of(m)
    assert v.interval is None and (v.rate.passed, v.rate.n) == (2, 2)
    assert v.rate.high == pytest.approx(1 - 0.025 ** 0.5)  # Clopper-Pearson upper bound of 0 failures in 2
    (f,) = judge_verify(m)
    assert "Student" not in f.message
    assert "the failure is gone on 2 of 2 seeds; with 2 seeds a failure rate up to 84% is still possible" in f.message


def test_a_continuous_measure_keeps_its_t_interval_beside_the_seed_rate():
    m = verification([run(s, [GRAD], 0.0) for s in range(3)], [run(s, [], 0.5 + 0.05 * s) for s in range(3)])
    v = verdict_of(m)
    assert "Student t" in v.interval.method and v.rate.passed == 3
    assert v.rate.high == pytest.approx(1 - 0.025 ** (1 / 3))  # 71%
    assert "up to 71%" in judge_verify(m)[0].message


@pytest.mark.parametrize("passed, n", [(0, 1), (1, 1), (1, 3), (2, 3), (5, 5)])
def test_the_seed_rate_is_clopper_pearson(passed, n):
    r = failure_rate(passed, n)
    k = n - passed  # failures
    low = 0.0 if k == 0 else stats.beta.ppf(0.025, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
    assert (r.low, r.high) == (pytest.approx(low), pytest.approx(high))
    assert f"{passed} of {n} seed" in r.text
