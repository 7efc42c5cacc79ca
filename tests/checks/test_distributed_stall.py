"""The hang judge on synthetic states: a collective not all ranks joined, a hung rank."""

from __future__ import annotations

from signalchain.checks.distributed_stall import judge_stall
from signalchain.records.distributed import Collective, RankStall, StallView


def _done(seq: int) -> list[Collective]:
    return [Collective(s, "all_reduce", [[10]], ["Float"]) for s in range(max(1, seq - 3), seq + 1)]


def _rank(rank: int, seq: int, pending: Collective | None = None, **kw: object) -> RankStall:
    recent = _done(seq) + ([pending] if pending else [])
    return RankStall(rank=rank, step=7, phase=str(kw.pop("phase", "backward")), since_s=3.0,
                     site=str(kw.pop("site", "train.py:40")), stack="File train.py, line 40",
                     seq=pending.seq if pending else seq, recent=recent, recorded=True, **kw)


def _view(states: dict[int, RankStall | None], observer: int = 0) -> StallView:
    return StallView(world=len(states), observer=observer, states=states, grace_s=1.5)


def test_barrier_against_all_reduce_is_a_desync() -> None:
    bar = Collective(5, "barrier", [], [], pending=True)
    red = Collective(5, "all_reduce", [[1]], ["Float"], pending=True)
    found = judge_stall(_view({0: _rank(0, 4, bar), 1: _rank(1, 4, red)}))
    assert [f.evidence["kind"] for f in found] == ["collective"]
    f = found[0]
    assert (f.id, f.severity.value, f.stage) == ("dist.desync", "error", "runtime")
    assert f.evidence["seq"] == 5 and len(f.evidence["missing_ranks"]) == 1
    assert "not all ranks joined collective 5" in f.message
    assert f.evidence["ranks"]["0"]["collective"] == "barrier"


def test_extra_all_reduce_while_others_are_in_the_side_group() -> None:
    extra = Collective(9, "all_reduce", [[1]], ["Float"], pending=True)
    side = Collective(3, "allgather", [[6]], ["Long"], pending=True, group="1",
                      label="signalchain's side group")
    states = {0: _rank(0, 8, side), 1: _rank(1, 8, extra), 2: _rank(2, 8, side)}
    found = judge_stall(_view(states))
    assert len(found) == 1
    f = found[0]
    assert f.evidence["kind"] == "collective" and f.evidence["missing_ranks"] == [0, 2]
    assert "collective 9 (all_reduce [1] float)" in f.message
    assert "side group" in f.message


def test_same_id_three_ranks_majority_joined() -> None:
    red = Collective(5, "all_reduce", [[10]], ["Float"], pending=True)
    bar = Collective(5, "barrier", [], [], pending=True)
    found = judge_stall(_view({0: _rank(0, 4, red), 1: _rank(1, 4, bar), 2: _rank(2, 4, red)}))
    assert found[0].evidence["joined"] == [0, 2] and found[0].evidence["missing_ranks"] == [1]


def test_rank_in_user_code_is_the_hung_rank_on_every_observer() -> None:
    red = Collective(12, "all_reduce", [[100]], ["Float"], pending=True)
    states = {0: _rank(0, 11, red), 1: _rank(1, 11, phase="loader", site="train.py:12")}
    a, b = judge_stall(_view(states, 0)), judge_stall(_view(states, 1))
    assert [f.message for f in a] == [f.message for f in b]  # rank 0 deduplicates on this
    assert len(a) == 1
    f = a[0]
    assert (f.id, f.evidence["kind"], f.evidence["hung_ranks"]) == ("dist.desync", "hung_rank", [1])
    assert "train.py:12" in f.message and f.evidence["waiting_ranks"] == [0]


def test_rank_that_published_nothing_is_hung() -> None:
    red = Collective(12, "all_reduce", [[100]], ["Float"], pending=True)
    found = judge_stall(_view({0: _rank(0, 11, red), 1: _rank(1, 11, red), 2: None}))
    assert len(found) == 1
    assert found[0].evidence["hung_ranks"] == [2] and found[0].evidence["silent_ranks"] == [2]
    assert "published no state" in found[0].message


def test_everyone_in_the_same_collective_or_in_user_code_is_not_distributed() -> None:
    red = Collective(12, "all_reduce", [[100]], ["Float"], pending=True)
    assert judge_stall(_view({0: _rank(0, 11, red), 1: _rank(1, 11, red)})) == []
    # A slow checkpoint save on every rank: nobody waits in a collective; the watchdog's own
    # perf.stall speaks for it.
    assert judge_stall(_view({0: _rank(0, 11, phase="checkpoint"),
                              1: _rank(1, 11, phase="checkpoint")})) == []
    # One rank's watchdog fired early in its own slow save: the others' silence is no hang.
    assert judge_stall(_view({0: _rank(0, 11, phase="checkpoint"), 1: None})) == []


def test_without_the_flight_recorder_sequence_numbers_and_phase_decide() -> None:
    def bare(rank: int, seq: int, phase: str) -> RankStall:
        return RankStall(rank=rank, step=3, phase=phase, seq=seq, site="t.py:1", recorded=False)

    found = judge_stall(_view({0: bare(0, 6, "collective"), 1: bare(1, 7, "collective")}))
    assert found[0].evidence["kind"] == "collective" and found[0].evidence["seq"] == 6
    assert found[0].evidence["missing_ranks"] == [1]
    found = judge_stall(_view({0: bare(0, 6, "collective"), 1: bare(1, 5, "forward")}))
    assert [f.evidence["hung_ranks"] for f in found] == [[1]]
