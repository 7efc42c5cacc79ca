"""The per-rank section clock: sections, the untimed rest, unknown names, the window."""

from __future__ import annotations

import time

from _clock import FakeClock
from signalchain.monitor import _dist_timing
from signalchain.monitor._dist_timing import SectionClock, run_queue_delay
from signalchain.records.distributed import SECTIONS


def test_sections_and_the_untimed_rest_make_the_step() -> None:
    clock = SectionClock()
    for _ in range(3):
        with clock.section("loader"):
            time.sleep(0.01)  # a sleep is the rank's own time: no run-queue delay takes it out
        clock.add("optimizer", 0.001)  # measured by the caller, in no section
        time.sleep(0.005)  # outside every section: "other"
        clock.end_step()
    steps, means, medians, step = clock.window()
    assert steps == 3 and set(medians) == set(SECTIONS)
    assert medians["loader"] >= 0.009 and medians["optimizer"] == 0.001
    assert medians["other"] > 0 and medians["forward"] == 0.0
    assert step >= medians["loader"] + medians["optimizer"]
    assert clock.window()[0] == 0  # the window was cleared


def test_unknown_section_counts_as_other_and_sync_marks_stick() -> None:
    clock = SectionClock()
    clock.add("checkpoint", 0.2, sync=True)
    clock.end_step()
    _, _, medians, _ = clock.window()
    assert medians["other"] >= 0.2
    assert clock.sync >= {"backward", "other"}


def test_current_section_is_known_while_inside() -> None:
    clock = SectionClock()
    with clock.section("loader"):
        with clock.section("forward"):
            assert clock.current == "forward"
        assert clock.current == "loader"
    assert clock.current is None


def test_run_queue_delay_is_monotonic_seconds() -> None:
    a = run_queue_delay()
    sum(range(100000))
    assert run_queue_delay() >= a >= 0.0


def test_time_inside_a_collective_leaves_the_section_it_ran_in(monkeypatch) -> None:
    # A fake clock (`tests/_clock.py`): the sleeps advance it by exactly their length, so the
    # sections' remainders are exact and no oversleep on a loaded machine can push them out.
    fake = FakeClock()
    monkeypatch.setattr(_dist_timing, "perf_counter", fake.perf_counter)
    monkeypatch.setattr(_dist_timing, "run_queue_delay", lambda: 0.0)
    clock = SectionClock()
    with clock.section("forward"):
        fake.sleep(0.03)  # the forward waits in a collective: DDP's buffer broadcast
        clock.collective(0.025)
    clock.enter("loader")
    fake.sleep(0.01)
    clock.collective(0.004)  # a collective in a section opened by a trainer hook
    clock.enter(None)
    clock.collective(0.002)  # outside every section: out of "other" by itself
    clock.end_step()
    _, _, medians, step = clock.window()
    assert medians["collective"] == 0.031
    # what is left of each section: its sleep less its collective (plus a few µs of this thread's CPU)
    assert 0.005 <= medians["forward"] < 0.006 and 0.006 <= medians["loader"] < 0.007
    assert step >= sum(medians[s] for s in SECTIONS) - 1e-9
    assert "collective" in clock.sync
