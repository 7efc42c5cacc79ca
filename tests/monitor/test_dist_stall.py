"""What a stalled rank publishes and reads: JSON round trip, freshness, the grace, stacks."""

from __future__ import annotations

import time
from pathlib import Path

import torch.distributed as dist

from signalchain.monitor._dist_stall import flight_record, main_stack, rank_stall, read_states, stall_to_json
from signalchain.records.distributed import Collective


def _state(**kw: object) -> dict:
    base = {"step": 4, "phase": "backward", "since_s": 2.0, "site": "train.py:9",
            "where": "torch/autograd/__init__.py:200 backward", "pid": 123, "thread": "MainThread",
            "stacks": {"MainThread": ["train.py:9 main", "autograd:200 backward"],
                       "signalchain-watchdog": ["x"]}}
    base.update(kw)
    return base


def test_rank_stall_from_the_watchdog_state() -> None:
    recent = [Collective(7, "all_reduce", [[3]], ["Float"], pending=True)]
    s = rank_stall(_state(), rank=1, seq=7, recent=recent)
    assert (s.rank, s.step, s.phase, s.site, s.pid, s.recorded) == (1, 4, "backward", "train.py:9", 123, True)
    assert s.stack.splitlines() == ["train.py:9 main", "autograd:200 backward"]
    assert s.pending() == recent[0]
    assert rank_stall(_state(step=None), rank=0, seq=3, recent=None).recorded is False


def test_main_stack_accepts_text_lists_and_dicts() -> None:
    assert main_stack("a\nb") == "a\nb"
    assert main_stack(["a", "b"]) == "a\nb"
    assert main_stack({"Thread-1": ["x"], "MainThread": ["y"]}) == "y"
    assert main_stack(None) == ""


def test_read_states_takes_fresh_states_and_gives_up_after_the_grace(tmp_path: Path) -> None:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    now = time.time()
    mine = rank_stall(_state(), rank=0, seq=5, recent=None)
    peer = rank_stall(_state(phase="loader"), rank=1, seq=4, recent=None)
    store.set("stall/1", stall_to_json(peer, now))
    store.set("stall/2", stall_to_json(peer, now - 3600))  # an earlier stall's: stale
    states = read_states(store, 3, mine, fresh_after=now - 10, grace_s=0.2)
    assert states[0] is mine and states[1] is not None and states[1].phase == "loader"
    assert states[2] is None


def test_flight_record_is_none_when_the_recorder_is_off(monkeypatch) -> None:
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    assert flight_record() is None


def test_a_rank_whose_check_refused_a_collective_is_waiting_in_it_not_hung() -> None:
    """The check raised on a mismatched collective; the rank's watchdog then fired while the rank was
    on its way out (under load it crossed the timeout): its state names the refused collective, so the
    stall judge sees two ranks in different collectives, never a rank hung in its own code."""
    from signalchain.checks.distributed_stall import judge_stall
    from signalchain.monitor._dist_check import CollectiveCheck, as_pending
    from signalchain.records.distributed import CollectiveCall, StallView

    check = CollectiveCheck(None, 0, 2, None, wait_s=1.0, on_finding=lambda f: None)
    assert as_pending(check) is None
    check.refused = (13, CollectiveCall("all_reduce", [[1]], ["float32"], "train.py:74"))
    refused = as_pending(check)
    assert refused is not None and (refused.seq, refused.op, refused.pending) == (14, "all_reduce", True)
    assert as_pending(check, refused=False) is None  # the watchdog's phase: the rank is not inside it
    mine = rank_stall(_state(phase="step", site="train.py:146"), rank=0, seq=13, recent=[refused])
    peer = rank_stall(_state(), rank=1, seq=13, recent=[Collective(14, "all_reduce", [[676]], ["Float"], pending=True)])
    found = judge_stall(StallView(2, 0, {0: mine, 1: peer}, 1.0))
    assert [f.evidence["kind"] for f in found] == ["collective"]
    without = rank_stall(_state(phase="step", site="train.py:146"), rank=0, seq=13, recent=[])
    assert [f.evidence["kind"] for f in judge_stall(StallView(2, 0, {0: without, 1: peer}, 1.0))] == ["hung_rank"]
