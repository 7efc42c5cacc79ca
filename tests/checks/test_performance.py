"""The performance judge on synthetic timing records: it fires on each pattern and stays silent on
noisy healthy runs. Times are made up here (seconds), never measured."""

import numpy as np
import pytest

from signalchain.checks.performance import judge_performance, restart_spikes, slow_class
from signalchain.records.performance import PerfMeasurement


def noisy(n, level, rng, spread=0.25):
    """Healthy-looking times: `level` seconds, log-normal jitter, a slower first item (warm-up)."""
    xs = (level * np.exp(rng.normal(0.0, spread, n))).tolist()
    xs[0] *= 1.7
    return xs


def report(waits, computes, syncs=(3, 3), calls=(63, 63)):
    return PerfMeasurement(waits=list(waits), computes=list(computes), device="cpu", syncs=list(syncs),
                      module_calls=list(calls), sync_sites={"train.py:42": 64})


def found(rep):
    return sorted((f.id, f.stage) for f in judge_performance(rep) if f.severity.value != "info")


def test_healthy_noisy_runs_raise_nothing():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(6, 34))
        rep = report(noisy(n, 0.05, rng), noisy(n, 0.095, rng))
        assert found(rep) == [], (rep.waits, rep.computes)
    # one long warm-up (the first update compiles kernels, the first batch starts the workers) is normal
    rep = report([0.9] + [0.05] * 16, [2.0] + [0.09] * 16)
    assert found(rep) == []
    info = [f for f in judge_performance(rep) if f.id == "perf.summary"]
    assert info and info[0].evidence["median_wait_ms"] == 50.0


def test_data_bound_when_waiting_is_as_long_as_computing():
    rng = np.random.default_rng(1)
    rep = report(noisy(13, 0.18, rng), noisy(13, 0.095, rng))
    (f,) = [f for f in judge_performance(rep) if f.id == "perf.data_bound"]
    assert f.stage == "loader" and f.evidence["wait_share"] > 0.5
    assert "waits" in f.message and "num_workers" in f.hint
    # tiny absolute waits are not worth a warning even when compute is tinier still
    assert found(report([0.01] * 10, [0.005] * 10)) == []


@pytest.mark.parametrize("k,r", [(2, 1), (4, 3), (4, 0), (8, 5)])
def test_one_slow_worker_in_round_robin(k, r):
    rng = np.random.default_rng(k * 10 + r)
    n = 4 * k + 1 + r  # the slow worker's turn comes at least 4 times
    waits = noisy(n, 0.05, rng, spread=0.15)
    for i in range(1, n):
        if i % k == r:
            waits[i] += 0.06
    rep = report(waits, noisy(n, 0.095, rng))
    assert found(rep) == [("perf.slow_worker", "loader")]
    cls = slow_class(waits)
    assert (cls.period, cls.residue) == (k, r)


def test_slow_worker_needs_the_pattern_to_repeat_and_the_others_normal():
    waits = [0.05] * 13
    waits[3] = waits[7] = waits[11] = 0.12  # three times at period 4: not yet a pattern
    assert slow_class(waits) is None
    rng = np.random.default_rng(3)
    noisy_waits = noisy(17, 0.05, rng, spread=0.8)  # wildly variable waits: noise, not a worker
    assert not [f for f in judge_performance(report(noisy_waits, [1.0] * 17)) if f.id == "perf.slow_worker"]


def test_worker_restarts_are_start_up_spikes_that_come_back_evenly():
    rng = np.random.default_rng(4)
    waits = noisy(17, 0.05, rng, spread=0.15)
    for i in (0, 8, 16):
        waits[i] = 0.05 + 0.3
    rep = report(waits, noisy(17, 0.095, rng))
    assert found(rep) == [("perf.worker_restart", "loader")]
    (f,) = [f for f in judge_performance(rep) if f.id == "perf.worker_restart"]
    assert f.evidence["positions"] == [0, 8, 16] and f.evidence["period"] == 8 and "persistent_workers" in f.hint


def test_restart_rule_wants_the_first_batch_and_two_even_recurrences():
    base = [0.05] * 17
    only_start = [0.6] + base[1:]  # a DataLoader's first batch pays the start-up: normal
    assert restart_spikes(only_start) is None and found(report(only_start, [0.1] * 17)) == []
    once = list(only_start)
    once[8] = 0.6  # one recurrence is not yet a pattern
    assert restart_spikes(once) is None
    uneven = list(once)
    uneven[10] = 0.6  # 0, 8, 10: not evenly spaced
    assert restart_spikes(uneven) is None
    even = list(once)
    even[16] = 0.6
    assert restart_spikes(even) == [0, 8, 16]


def test_a_stalled_update_is_blamed_on_the_runtime_not_the_loader():
    rng = np.random.default_rng(5)
    comps = noisy(12, 0.09, rng, spread=0.15)
    comps[5] = 0.9
    rep = report(noisy(12, 0.05, rng, spread=0.15), comps)
    assert found(rep) == [("perf.stall", "runtime")]
    (f,) = judge_performance(rep)[:1]
    assert f.evidence["updates"] == [5] and "checkpoint" in f.hint
    # twice as slow once is noise on a shared machine, not a stall
    comps[5] = 0.2
    assert found(report([0.05] * 12, comps)) == []


def test_a_single_long_wait_is_a_loader_stall():
    waits = [0.05] * 12
    waits[6] = 1.2
    assert found(report(waits, [0.09] * 12)) == [("perf.stall", "loader")]


@pytest.mark.parametrize("syncs,calls,fires", [
    ((65, 65), (63, 63), True),  # a read per module call
    ((40, 41), (900, 900), True),  # many reads, whatever the model's size
    ((12, 12), (30, 30), True),  # a small model, a read for every other module
    ((12, 12), (400, 400), False),  # a few logged scalars in a large model
    ((3, 3), (63, 63), False),
])
def test_sync_bound_counts_reads_per_update(syncs, calls, fires):
    rep = report([0.05] * 8, [0.09] * 8, syncs=syncs, calls=calls)
    hit = [f for f in judge_performance(rep) if f.id == "perf.sync_bound"]
    assert bool(hit) is fires
    if fires:
        assert hit[0].stage == "runtime" and "train.py:42" in hit[0].hint


def test_no_loader_no_timings():
    assert judge_performance(PerfMeasurement(waits=[], computes=[], device="cpu")) == []
    rep = PerfMeasurement(waits=[], computes=[0.1, 0.05, 0.05, 0.06, 0.9, 0.05], device="cpu", has_loader=False)
    assert found(rep) == [("perf.stall", "runtime")]


def test_time_spent_waiting_for_a_cpu_is_not_blamed_on_the_pipeline():
    n = 13
    computes, waits = [0.09] * n, [0.05] * n
    cdelay, wdelay = [0.002] * n, [0.001] * n
    computes[4], cdelay[4] = 1.5, 1.4  # another process held the cores: runnable, not running
    waits[7], wdelay[7] = 0.9, 0.86
    rep = PerfMeasurement(waits=waits, computes=computes, device="cpu", wait_delays=wdelay, compute_delays=cdelay)
    assert found(rep) == []
    (summary,) = judge_performance(rep)
    assert summary.evidence["busy_updates"] == [4, 7]
    computes[9] = 0.9  # a stall with no CPU wait (a blocking upload sleeps) is still a stall
    assert found(rep) == [("perf.stall", "runtime")]


def test_where_the_threads_that_queued_are_unknown_the_data_verdict_is_withheld_with_what_to_run():
    """Only the sum over threads was read: two threads queued 5.9 s in a 3 s update. The update's own
    time lies anywhere in [0, 3 s], so whether it waits for data longer than it computes is not said."""
    n = 13
    rep = PerfMeasurement(waits=[0.05] * n, computes=[3.0] * n, device="cpu", wait_delays=[0.04] * n,
                     compute_delays=[5.9] * n, syncs=[65], module_calls=[63])
    rep.computes[5] = 9.0  # 3.1 s or more of its own: no stall against a median that may be 3 s
    out = judge_performance(rep)
    assert [f.id for f in out if f.severity.value != "info"] == ["perf.sync_bound"]  # counts need no idle machine
    (busy,) = [f for f in out if f.id == "perf.machine_busy"]
    assert busy.severity.value == "info" and "set_num_threads" in busy.hint
    # the wait summed over threads exceeds the wall time: said as threads at a time, never "X of Y in all"
    assert "threads waiting at any moment" in busy.message and "13 updates" in busy.message
    assert busy.evidence["compute_ms"] == [0.0, 3000.0]  # the range, not a dropped measurement
    (summary,) = [f for f in out if f.id == "perf.summary"]
    assert "wall-clock bounds" in summary.message and "65 host reads" in summary.message


def _loaded(waits, computes, wait_queued, compute_queued, others=0.0, reread_from=None):
    """A record of a busy machine: the loop thread's own run-queue delay read, and `others` seconds
    per update queued by the process's other threads."""
    n = len(computes)
    return PerfMeasurement(waits=list(waits), computes=list(computes), device="cpu",
                           wait_queued=list(wait_queued), compute_queued=list(compute_queued),
                           wait_delays=list(wait_queued), compute_delays=[q + others for q in compute_queued],
                           wait_cpu=[0.0] * n, compute_cpu=[0.0] * n, reread_from=reread_from)


def test_the_loop_threads_cpu_wait_is_taken_out_not_dropped():
    """Every update queued for a CPU 60-80 % of its wall time (load 3-6 on 2 cores): the old judge
    dropped them all; own time is wall less the thread's own delay, exactly."""
    rng = np.random.default_rng(7)
    n = 33
    wait_own, comp_own = noisy(n, 0.10, rng), noisy(n, 0.06, rng)  # data bound: 100 ms against 60 ms
    stretch = rng.uniform(1.5, 4.0, n)
    waits = [w * s for w, s in zip(wait_own, stretch)]
    comps = [c * s for c, s in zip(comp_own, stretch)]
    rep = _loaded(waits, comps, [w - o for w, o in zip(waits, wait_own)], [c - o for c, o in zip(comps, comp_own)])
    out = judge_performance(rep)
    (f,) = [f for f in out if f.id == "perf.data_bound"]
    assert f.evidence["median_wait_ms"] == pytest.approx(1000 * float(np.median(wait_own[1:])), abs=0.1)
    assert "queued for a CPU" in f.message and f"of {n - 1} updates waited longer" in f.message
    assert not [f for f in out if f.id == "perf.machine_busy"]
    clean = _loaded(comps, waits, [c - o for c, o in zip(comps, comp_own)], [w - o for w, o in zip(waits, wait_own)])
    assert found(clean) == []  # the same load on a pipeline that computes longer than it waits


def test_other_threads_queueing_bounds_the_verdict_and_withholds_it_only_when_it_could_flip():
    n = 17
    # the loop thread waits 80 ms and computes up to 60 ms; its pool threads queued 50 ms per update
    rep = _loaded([0.08] * n, [0.06] * n, [0.0] * n, [0.0] * n, others=0.05)
    ids = [f.id for f in judge_performance(rep)]
    assert "perf.data_bound" in ids  # 80 ms ≥ 60 ms whoever queued: said
    rep = _loaded([0.05] * n, [0.06] * n, [0.0] * n, [0.0] * n, others=0.05)
    out = judge_performance(rep)
    assert "perf.data_bound" not in [f.id for f in out]  # 50 ms against 10-60 ms: could be either
    (busy,) = [f for f in out if f.id == "perf.machine_busy"]
    assert "set_num_threads(1)" in busy.hint and busy.evidence["compute_ms"] == [10.0, 60.0]
    rep = _loaded([0.005] * n, [0.06] * n, [0.0] * n, [0.0] * n, others=0.05)
    assert [f.id for f in judge_performance(rep)] == ["perf.summary"]  # 5 ms: under the floor whoever queued


def test_a_cold_first_pass_is_not_the_steady_state():
    """The first pass decodes every clip (100 ms a batch); read again from a fresh iterator, the same
    batches come from the cache: not data bound, and said why."""
    rng = np.random.default_rng(8)
    first, second = noisy(33, 0.10, rng), noisy(8, 0.0002, rng)
    rep = report(first + second, noisy(41, 0.06, rng))
    rep.reread_from = 33
    out = judge_performance(rep)
    assert found(rep) == []
    (cold,) = [f for f in out if f.id == "perf.cold_start"]
    assert cold.severity.value == "info" and cold.evidence["second_pass"] and cold.evidence["cold_wait_share"] > 0.5
    (summary,) = [f for f in out if f.id == "perf.summary"]
    assert summary.evidence["median_wait_ms"] < 1 and "second pass" in summary.message
    # a loader that decodes on every access is as slow the second time: data bound
    again = report(first + noisy(8, 0.10, rng), noisy(41, 0.06, rng))
    again.reread_from = 33
    assert found(again) == [("perf.data_bound", "loader")]
    assert not [f for f in judge_performance(again) if f.id == "perf.cold_start"]


def test_one_faster_batch_on_the_second_pass_is_not_a_cold_start():
    first = [0.3] + [0.1] * 32
    second = [0.3, 0.04, 0.11, 0.1, 0.09, 0.1, 0.1, 0.1]  # not every batch faster
    rep = report(first + second, [0.06] * 41)
    rep.reread_from = 33
    assert found(rep) == [("perf.data_bound", "loader")]


def test_a_warm_up_at_the_start_of_the_run_is_left_out_of_the_steady_state():
    rng = np.random.default_rng(9)
    waits = noisy(33, 0.01, rng, spread=0.15)
    waits[:6] = [0.5, 0.2, 0.18, 0.22, 0.19, 0.21]  # workers starting, first decodes
    rep = report(waits, noisy(33, 0.06, rng, spread=0.15))
    out = judge_performance(rep)
    assert found(rep) == []
    (cold,) = [f for f in out if f.id == "perf.cold_start"]
    assert cold.evidence["warmup"] == 6 and not cold.evidence["second_pass"]


def test_noisy_waits_show_no_warm_up():
    rng = np.random.default_rng(10)
    for _ in range(300):
        n = int(rng.integers(6, 50))
        rep = report(noisy(n, 0.05, rng), noisy(n, 0.095, rng))
        assert not [f for f in judge_performance(rep) if f.id == "perf.cold_start"], rep.waits


LIB = "/env/lib/python3.11/site-packages/transformers/models/encodec/modeling_encodec.py:153"


def library_report(user, library, calls):
    rep = report([0.05] * 8, [0.09] * 8, syncs=[u + v for u, v in zip(user, library)], calls=calls)
    rep.library_syncs = list(library)
    rep.library_sites = {LIB: 2 * library[0]}
    rep.library_callers = {LIB: "train.py:17"}
    return rep


def loud(findings):
    return [f for f in findings if f.id == "perf.sync_bound" and f.severity.value != "info"]


def test_reads_inside_a_library_are_said_not_blamed_on_the_pipeline():
    """HF's Encodec reads its paddings on the host: 75 per update, beside 1 of the pipeline's own."""
    out = judge_performance(library_report(user=(1, 1), library=(75, 75), calls=(165, 165)))
    assert loud(out) == []
    (info,) = [f for f in out if f.id == "perf.sync_bound"]
    assert info.severity.value == "info" and info.evidence["owner"] == "library"
    # the hint names the library's file from its package; the evidence keeps the full path
    assert "transformers/models/encodec/modeling_encodec.py:153 (×150)" in info.hint
    assert "site-packages" not in info.hint and LIB in info.evidence["sites"]
    assert "called from train.py:17" in info.hint


def test_the_pipelines_own_reads_are_judged_apart_from_the_librarys():
    out = judge_performance(library_report(user=(65, 65), library=(75, 75), calls=(165, 165)))
    (warn,) = loud(out)
    assert warn.evidence["owner"] == "user" and warn.evidence["syncs_per_update"] == 65
    assert "train.py:42" in warn.hint


def test_a_library_read_in_every_module_call_is_a_warning():
    out = judge_performance(library_report(user=(0, 0), library=(200, 200), calls=(165, 165)))
    (warn,) = loud(out)
    assert warn.evidence["owner"] == "library" and "transformers/models/encodec/modeling_encodec.py:153" in warn.hint


def test_a_fast_update_keeps_its_digits():
    """A 40 µs update is not "0.0 ms": the summary picks the unit that keeps the figure."""
    rep = PerfMeasurement(waits=[2e-5] * 8, computes=[4e-5] * 8, device="cpu", syncs=[0], module_calls=[3])
    (summary,) = [f for f in judge_performance(rep) if f.id == "perf.summary"]
    assert "median update 40.0 µs" in summary.message and "0.0 ms" not in summary.message


def test_an_update_timed_again_on_one_thread_bounds_the_compute_so_the_verdict_holds():
    """Pool threads that queued leave the loop thread blocked for them: own time on 2 threads 120 ms
    (idle 60 ms) against a 100 ms wait straddles the verdict. The same update on one intra-op thread
    (80 ms, exact: no pool) bounds the idle compute, and 100 ms waiting ≥ 80 ms is data bound."""
    n = 17
    straddle = _loaded([0.10] * n, [0.12] * n, [0.0] * n, [0.0] * n, others=0.1)
    assert "perf.machine_busy" in [f.id for f in judge_performance(straddle)]
    straddle.one_thread = [0.08, 0.081, 0.079, 0.08, 0.082]
    out = judge_performance(straddle)
    (f,) = [f for f in out if f.id == "perf.data_bound"]
    assert f.evidence["one_thread"] and f.evidence["median_compute_ms"] == pytest.approx(80.0, abs=0.5)
    assert "one intra-op thread" in f.message and "perf.machine_busy" not in [g.id for g in out]
    slower = _loaded([0.10] * n, [0.12] * n, [0.0] * n, [0.0] * n, others=0.1)
    slower.one_thread = [0.11] * 5  # one thread still computes longer than the wait: still open
    assert "perf.data_bound" not in [g.id for g in judge_performance(slower)]
    compute_bound = _loaded([0.01] * n, [0.12] * n, [0.0] * n, [0.0] * n, others=0.1)
    compute_bound.one_thread = [0.005] * 5  # never lowers a wait under the floor into a verdict
    assert "perf.data_bound" not in [g.id for g in judge_performance(compute_bound)]
