"""RankWatch without a process group: a no-op that never raises; a straggler said only when it persists."""

from __future__ import annotations

import torch

from signalchain.checks.base import make
from signalchain.monitor.distributed import RankWatch


def _straggler(rank: int, section: str) -> object:
    return make("dist.straggler", "warning", "runtime", f"rank {rank} is slow in {section}", "checks.distributed",
                rank=rank, section=section)


def test_without_a_process_group_it_observes_nothing_and_never_raises() -> None:
    rw = RankWatch(torch.nn.Linear(2, 2), every=1)
    with rw.section("forward"):
        pass
    rw.enter("loader")
    rw.step_end(0)
    assert rw.world == 1 and rw.findings == [] and rw.pending_collective() is None
    rw.close()


def test_a_straggler_is_said_at_the_second_window_in_a_row_only() -> None:
    rw = RankWatch(torch.nn.Linear(2, 2))
    other = make("dist.desync", "error", "runtime", "x", "checks.distributed")
    assert rw._persistent([_straggler(1, "loader"), other]) == [other]  # first window: not yet
    assert [f.evidence["rank"] for f in rw._persistent([_straggler(1, "loader")])] == [1]  # again: said
    assert rw._persistent([_straggler(1, "forward")]) == []  # another section starts over
    assert rw._persistent([]) == []
    assert rw._persistent([_straggler(1, "forward")]) == []  # a gap breaks the run
