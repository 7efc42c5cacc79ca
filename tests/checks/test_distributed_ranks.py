"""Pure judges of a run across ranks: a NaN's origin on another rank, a collective the ranks disagree on."""

from __future__ import annotations

from signalchain.checks.base import make
from signalchain.checks.distributed_collective import judge_collective
from signalchain.checks.distributed_nonfinite import attribute, from_rank, needs_origin
from signalchain.records.distributed import CollectiveCall


def _unlocated(step: int = 7) -> object:
    return make("nonfinite.first", "error", None, f"step {step}: the gradient norm is not finite (loss 1.2, gradient "
                "norm nan); replaying this step on its batch makes no non-finite value", "monitor",
                hint="…", step=step, replay_finite=True, rank=0)


def _located(rank: int = 1, step: int = 7) -> object:
    return make("nonfinite.first", "error", "loss", "first non-finite value: log at train.py:12", "checks.numerics",
                hint="use log(x.clamp_min(eps))", step=step, rank=rank)


def test_rank_0s_unlocated_verdict_names_the_rank_that_located_it() -> None:
    own = _unlocated()
    assert needs_origin(own)
    loss = make("nonfinite.loss", "error", "loss", "the loss is nan", "checks.numerics", step=7, rank=1)
    named = attribute(own, [loss, _located()])
    assert named.evidence["origin_ranks"] == [1] and named.evidence["origin"]["id"] == "nonfinite.first"
    assert "rank 1's batch" in named.message and "train.py:12" in named.message
    assert named.stage == "loss" and "replay=" not in named.hint and "clamp_min" in named.hint


def test_no_origin_from_another_step_or_an_unlocated_rank() -> None:
    own = _unlocated()
    assert attribute(own, [_located(step=8)]) is own
    assert attribute(own, [_unlocated()]) is own  # rank 1 replayed finite too: nothing to name
    assert attribute(_located(), [_located(rank=2)]).message == _located().message  # located itself: as it is


def test_a_copied_verdict_opens_with_its_rank_once() -> None:
    copied = from_rank(_located())
    assert copied.message.startswith("rank 1: first non-finite")
    assert from_rank(copied).message == copied.message


def test_matching_collectives_pass_and_sizes_count_only_where_they_must_agree() -> None:
    a = CollectiveCall("all_reduce", [[8]], ["float32"], "train.py:40")
    assert judge_collective(3, {0: a, 1: CollectiveCall("all_reduce", [[8]], ["float32"], "train.py:40")}) == []
    uneven = {0: CollectiveCall("all_to_all_single", [[6], [6]], ["float32"] * 2),
              1: CollectiveCall("all_to_all_single", [[2], [2]], ["float32"] * 2)}
    assert judge_collective(3, uneven) == []  # uneven splits are all_to_all's business


def test_a_rank_0_only_reduce_is_a_mismatch_naming_both_calls() -> None:
    calls = {0: CollectiveCall("all_reduce", [[1]], ["float32"], "train.py:73"),
             1: CollectiveCall("broadcast_coalesced", [[4, 4]], ["float32"], "train.py:56")}
    [f] = judge_collective(21, calls, observer=1)
    assert f.id == "dist.desync" and f.severity.value == "error" and f.evidence["kind"] == "mismatch"
    assert f.evidence["seq"] == 22 and f.evidence["calls"]["0"]["site"] == "train.py:73"
    assert "all_reduce [1] float32 at train.py:73" in f.message
    assert "broadcast_coalesced [4, 4] float32 at train.py:56" in f.message
    sized = {0: CollectiveCall("all_reduce", [[1]], ["float32"]), 1: CollectiveCall("all_reduce", [[676]], ["float32"])}
    assert "different sizes" in judge_collective(13, sized)[0].message
