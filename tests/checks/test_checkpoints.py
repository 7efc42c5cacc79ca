"""The checkpoint judges on hand-built records: scale-free health, the causal order of places, the findings."""

from __future__ import annotations

import math

import pytest

from signalchain.checks.checkpoints import bisect_findings, judge_change, judge_health
from signalchain.records.checkpoints import (
    CheckpointBisect,
    CheckpointHealth,
    CheckpointPair,
    GroupStats,
    StageChange,
)

MOMENTS = {"exp_avg.max": 0.1, "exp_avg.rms": 0.01, "exp_avg.finite": 1.0, "exp_avg_sq.max": 0.01,
           "exp_avg_sq.mean": 1e-3, "exp_avg_sq.finite": 1.0}


def _group(name="head", **kw) -> GroupStats:
    base = dict(params=10, lr=1e-3, weight_norm=2.0, weight_finite=1.0, step=5.0, moments=dict(MOMENTS),
                grad_norm=0.5, update_ratio=0.01)
    base.update(kw)
    return GroupStats(name, **base)


def _health(name="c", index=0, step=None, loss=2.0, grad_norm=0.7, groups=None, **kw) -> CheckpointHealth:
    return CheckpointHealth(name, index, step if step is not None else index, loss=loss, grad_norm=grad_norm,
                            groups=groups if groups is not None else [_group("body"), _group("head")],
                            has_optimizer_state=True, **kw)


def test_a_healthy_run_within_the_factor_is_healthy():
    base = _health()
    h = _health(index=5, loss=9 * base.loss, grad_norm=9 * base.grad_norm,
                groups=[_group("body", grad_norm=4.0), _group("head", update_ratio=0.09)])
    assert judge_health(h, base, golden_loss=2.5) == []


@pytest.mark.parametrize(("change", "place", "stat"), [
    (dict(loss=float("nan")), "loss", "loss"),
    (dict(loss=25.0), "loss", "loss"),
    (dict(grad_norm=math.inf), "grad", "grad_norm"),
    (dict(groups=[_group("body"), _group("head", update_ratio=0.2)]), "update", "update_ratio"),
    (dict(groups=[_group("body"), _group("head", moments={**MOMENTS, "exp_avg_sq.mean": 0.5})]),
     "moments", "exp_avg_sq.mean"),
    (dict(groups=[_group("body"), _group("head", moments={**MOMENTS, "exp_avg_sq.finite": 0.9})]),
     "moments", "exp_avg_sq.finite"),
    (dict(groups=[_group("body", weight_finite=0.5), _group("head")]), "weights", "weight_finite"),
    (dict(error="RuntimeError: boom"), "loss", "step"),
])
def test_unhealthy_against_the_good_end(change, place, stat):
    reasons = judge_health(_health(index=3, **change), _health(), golden_loss=2.5)
    assert (reasons[0].place, reasons[0].statistic) == (place, stat)


def test_a_zero_baseline_is_not_judged():
    base = _health(groups=[_group("body"), _group("head", grad_norm=0.0)])
    assert judge_health(_health(index=2, groups=[_group("body"), _group("head", grad_norm=5.0)]), base, 2.5) == []


def test_the_good_end_is_judged_against_the_golden_loss_and_finiteness_only():
    assert judge_health(_health(loss=2.0, grad_norm=1e9), None, golden_loss=2.5) == []
    (r,) = judge_health(_health(loss=30.0), None, golden_loss=2.5)
    assert (r.place, r.baseline) == ("loss", 2.5)


def _pair(a_groups, b_groups, stages=(), **kw) -> CheckpointPair:
    return CheckpointPair(_health("a", 4, groups=a_groups), _health("b", 5, groups=b_groups, **kw), 1,
                          {"body": 0.01, "head": 0.01}, list(stages))


def test_places_follow_the_causal_order_lr_before_moments_before_weights():
    pair = _pair([_group("body"), _group("head")],
                 [_group("body", weight_norm=50.0), _group("head", lr=1.0, moments={**MOMENTS, "exp_avg_sq.max": 9.0})],
                 loss=100.0)
    places = [r.place for r in judge_change(pair)]
    assert places[:3] == ["lr", "moments", "weights"] and places[-1] == "loss"


def test_within_a_place_the_largest_ratio_leads():
    pair = _pair([_group("body"), _group("head")],
                 [_group("body", moments={**MOMENTS, "exp_avg.max": 2.0}),
                  _group("head", moments={**MOMENTS, "exp_avg_sq.max": 100.0})])
    first = judge_change(pair)[0]
    assert (first.group, first.statistic) == ("head", "exp_avg_sq.max")


def test_weights_that_moved_more_than_the_steps_explain_are_a_change():
    pair = _pair([_group("body"), _group("head", update_ratio=0.001)], [_group("body"), _group("head")])
    pair.drift["head"] = 0.5  # 500× one update ratio, for 1 step between
    (r,) = judge_change(pair)
    assert (r.place, r.statistic, r.group) == ("weights", "drift", "head")
    pair.steps_between = 100  # 100 steps of 0.001 explain most of it
    assert judge_change(pair) == []


def test_a_step_going_backwards_and_an_exact_stage_changing_are_changes():
    stages = [StageChange("tokens", "tensor", False, True), StageChange("logits", "tensor", False, False,
                                                                        {"abs_max": 1.0, "std": 0.3},
                                                                        {"abs_max": 1.5, "std": 0.3})]
    pair = _pair([_group("body"), _group("head")], [_group("body"), _group("head", step=1.0)], stages)
    reasons = judge_change(pair)
    assert [(r.place, r.statistic) for r in reasons] == [("moments", "step"), ("stages", "content")]
    assert reasons[1].stage == "tokens"


def _res(status, probes, lo=None, hi=None, pair=None) -> CheckpointBisect:
    return CheckpointBisect(status, [p.name for p in probes], list(probes), lo, hi, pair)


def test_findings_of_a_found_search_name_the_checkpoint_group_and_statistic():
    good, a = _health("ckpt-0", 0), _health("ckpt-4", 1)
    b = _health("ckpt-5", 2, groups=[_group("body"), _group("head", moments={**MOMENTS, "exp_avg_sq.max": 50.0})])
    b.reasons = judge_health(b, good, 2.5)
    res = CheckpointBisect("found", ["ckpt-0", "ckpt-4", "ckpt-5"], [good, b, a], 1, 2, CheckpointPair(a, b))
    (f,) = bisect_findings(res)
    assert (f.id, f.severity.value, f.stage) == ("bisect.first_bad_checkpoint", "error", "optimizer")
    assert "ckpt-5" in f.message and "'head'" in f.message and "exp_avg_sq.max" in f.message and "5e+03" in f.message
    assert f.evidence["groups"][1]["first_unhealthy"]["exp_avg_sq.max"] == 50.0


def test_a_gradual_drift_is_named_from_the_good_end():
    good, a = _health("ckpt-0", 0), _health("ckpt-4", 1, grad_norm=5.0)
    b = _health("ckpt-5", 2, grad_norm=8.0)
    b.reasons = judge_health(b, good, 2.5)
    res = CheckpointBisect("found", ["ckpt-0", "ckpt-4", "ckpt-5"], [good, b, a], 1, 2, CheckpointPair(a, b))
    (f,) = bisect_findings(res, judge_change(res.pair))
    assert "drifted" in f.message and "ckpt-0" in f.message and f.stage == "grad"


def test_skips_flaky_and_ambiguous_findings():
    good, bad = _health("c0", 0), _health("c9", 9)
    skipped = CheckpointHealth("c5", 5, loaded=False, skip_reason="c5: not a loadable torch checkpoint")
    ids = [f.id for f in bisect_findings(_res("flaky_bad", [good, bad, skipped]))]
    assert ids == ["bisect.skipped", "bisect.flaky"]
    assert [f.id for f in bisect_findings(_res("unrunnable_end", [good, skipped]))] == ["bisect.skipped",
                                                                                         "bisect.unrunnable_end"]
    a, b = _health("c4", 4), _health("c6", 6, loss=50.0)
    res = CheckpointBisect("ambiguous", [f"c{i}" for i in range(10)], [good, bad, skipped, a, b], 4, 6,
                           CheckpointPair(a, b))
    f = next(f for f in bisect_findings(res) if f.id == "bisect.ambiguous")
    assert f.severity.value == "warning" and f.evidence["candidates"] == ["c5", "c6"]
