"""The exchange judges on synthetic records: desync, straggler, parameter divergence."""

from __future__ import annotations

import random

import pytest

from signalchain.checks.distributed import (
    judge_desync,
    judge_exchange,
    judge_param_divergence,
    judge_straggler,
    odd_ranks,
)
from signalchain.records.distributed import SECTIONS, DistExchange, RankWindow


def _window(rank: int, rng: random.Random, slow: dict[str, float] | None = None,
            jitter: float = 0.3, seq: int = 40) -> RankWindow:
    """A DDP-like rank: its own work, plus waiting in backward for the slowest rank's extra."""
    base = {"loader": 0.002, "forward": 0.004, "backward": 0.006, "optimizer": 0.002, "other": 0.001}
    med = {s: v * (1 + jitter * rng.random()) + (slow or {}).get(s, 0.0) for s, v in base.items()}
    return RankWindow(rank=rank, steps=10, mean=dict(med), median=med,
                      step_median=sum(med.values()), seq=seq)


def _ddp(windows: list[RankWindow]) -> list[RankWindow]:
    """Make the fast ranks wait in backward until the slowest rank arrives (what DDP does)."""
    work = [sum(v for s, v in w.median.items() if s != "backward") for w in windows]
    for w, own in zip(windows, work):
        w.median["backward"] += max(work) - own
        w.step_median = sum(w.median.values())
    return windows


def _exchange(windows: list[RankWindow], **kw: object) -> DistExchange:
    return DistExchange(step=19, world=len(windows), windows=windows, **kw)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("world", [2, 4])
def test_clean_ranks_raise_nothing(seed: int, world: int) -> None:
    rng = random.Random(seed)
    names = [f"layer{i}.weight" for i in range(5)]
    hashes = [[rng.getrandbits(63) for _ in names]] * world
    ex = _exchange(_ddp([_window(r, rng) for r in range(world)]), param_names=names,
                   param_counts=[len(names)] * world, hashes=hashes, prev_seq=[32] * world)
    assert judge_exchange(ex) == []


@pytest.mark.parametrize("seed", range(6))
def test_straggler_named_from_its_loader_not_the_waiting_ranks_backward(seed: int) -> None:
    rng = random.Random(seed)
    wins = _ddp([_window(r, rng, slow={"loader": 0.02} if r == 2 else None) for r in range(3)])
    # The fast ranks' backward is inflated by waiting; that must not name them.
    assert wins[0].median["backward"] > 2 * wins[2].median["backward"]
    found = judge_straggler(_exchange(wins))
    assert [f.evidence["rank"] for f in found] == [2]
    f = found[0]
    assert f.id == "dist.straggler" and f.severity.value == "warning" and f.stage == "runtime"
    assert f.evidence["section"] == "loader"
    assert f.evidence["relative"]["2"]["loader"] > 1.5
    assert set(f.evidence["seconds"]["0"]) == set(SECTIONS)


def test_straggler_needs_the_ratio_and_a_share_of_the_step() -> None:
    rng = random.Random(0)
    # 1.2x slower forward: under the ratio.
    wins = _ddp([_window(0, rng, jitter=0), _window(1, rng, jitter=0, slow={"forward": 0.0008})])
    assert judge_straggler(_exchange(wins)) == []
    # Twice as slow, but a tiny share of the step (a long synchronising backward dominates).
    wins = [_window(r, rng, jitter=0) for r in range(2)]
    for w in wins:
        w.median["backward"] = 1.0
        w.step_median = sum(w.median.values())
    wins[1].median["optimizer"] *= 2
    assert judge_straggler(_exchange(wins)) == []


def test_untimed_rest_is_synchronising_when_no_backward_was_timed() -> None:
    rng = random.Random(1)
    wins = _ddp([_window(r, rng, slow={"forward": 0.03} if r == 1 else None) for r in range(2)])
    for w in wins:  # the caller timed no backward: the waiting lands in "other"
        w.median["other"] += w.median.pop("backward")
        w.median["backward"] = 0.0
    found = judge_straggler(_exchange(wins))
    assert [(f.evidence["rank"], f.evidence["section"]) for f in found] == [(1, "forward")]
    assert "other" in found[0].evidence["synchronising"]


def test_desync_names_the_odd_rank() -> None:
    rng = random.Random(2)
    wins = [_window(r, rng, seq=41 if r == 1 else 40) for r in range(3)]
    found = judge_desync(_exchange(wins, prev_seq=[32, 32, 32]))
    assert len(found) == 1
    f = found[0]
    assert (f.id, f.severity.value, f.stage) == ("dist.desync", "error", "runtime")
    assert f.evidence["ranks"] == [1] and f.evidence["since_previous"] == [8, 9, 8]
    assert "rank 1: 41" in f.message


def test_desync_silent_when_sequence_numbers_are_unknown() -> None:
    rng = random.Random(3)
    assert judge_desync(_exchange([_window(0, rng, seq=-1), _window(1, rng, seq=7)])) == []


def test_param_divergence_names_first_parameter_and_ranks() -> None:
    names = ["embed.weight", "block.0.weight", "block.0.bias", "head.weight"]
    same = [11, 22, 33, 44]
    hashes = [same, same, [11, 22, 34, 45], same]
    ex = _exchange([_window(r, random.Random(r)) for r in range(4)], param_names=names,
                   param_counts=[4] * 4, hashes=hashes, max_abs_diff={0: 0.0, 1: 0.0, 2: 1e-3, 3: 0.0})
    found = judge_param_divergence(ex)
    assert len(found) == 1
    f = found[0]
    assert (f.id, f.severity.value, f.stage) == ("dist.param_divergence", "error", "model")
    assert f.evidence["parameter"] == "block.0.bias" and f.evidence["ranks"] == [2]
    assert f.evidence["differing"] == 2 and f.evidence["max_abs_diff"]["2"] == pytest.approx(1e-3)
    assert "'block.0.bias'" in f.message


def test_param_divergence_two_ranks_takes_rank0_as_reference() -> None:
    ex = _exchange([_window(r, random.Random(r)) for r in range(2)], param_names=["w"],
                   param_counts=[1, 1], hashes=[[5], [6]])
    assert judge_param_divergence(ex)[0].evidence["ranks"] == [1]


def test_param_divergence_on_different_parameter_counts() -> None:
    ex = _exchange([_window(r, random.Random(r)) for r in range(3)], param_counts=[4, 4, 3])
    f = judge_param_divergence(ex)[0]
    assert f.evidence["ranks"] == [2] and f.evidence["param_counts"] == [4, 4, 3]


def test_odd_ranks_majority_and_ties() -> None:
    assert odd_ranks([1, 1, 2]) == [2]
    assert odd_ranks([2, 1, 1]) == [0]
    assert odd_ranks([1, 2]) == [1]
    assert odd_ranks([1, 2, 2, 1]) == [1, 2]
