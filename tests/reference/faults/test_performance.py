"""The performance faults: each makes the run wait where its bug would, and the clean run does not.

Symptoms are measured around `next(loader)` and `train_step` with a fake clock (the faults' sleeps
recorded, not slept: `tests/_clock.py`), and with the torch profiler's op counts, never through a
signalchain detector. No assertion races wall-clock times, so a loaded machine cannot flip one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.profiler import profile

from _clock import FakeClock, install
from signalchain.reference import ReferencePipeline
from signalchain.reference import pipeline as pipeline_module
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import _pace, catalogue, get_fault, performance
from signalchain.reference.faults.performance import (
    READ_LATENCY_S,
    RESTART_COST_S,
    RESTART_EVERY,
    RESTART_FACTOR,
    SLOW_WORKER_DELAY_S,
    SLOW_WORKER_FACTOR,
    STALL_FACTOR,
    STALL_S,
    WORKERS,
)

torch.set_num_threads(1)

# A small model and short crops: the step costs a few tens of milliseconds, like a fast GPU step.
CFG = RefConfig(batch_size=8, train_size=16, valid_size=8, segment_seconds=1.0, dim=64, layers=1)
NAMES = {"slow_clip_reads": ("perf.data_bound", "loader"), "slow_worker": ("perf.slow_worker", "loader"),
         "worker_restarts": ("perf.worker_restart", "loader"), "checkpoint_stall": ("perf.stall", "runtime"),
         "per_module_item_sync": ("perf.sync_bound", "runtime")}


def _pipe(name: str | None, cfg: RefConfig = CFG) -> ReferencePipeline:
    p = ReferencePipeline(cfg, [name] if name else [])
    p.training_examples()  # decode every training clip once: the clean loader then never waits
    return p


# ---- registration and a step that runs ------------------------------------------------------------

def test_every_performance_fault_is_registered_with_id_and_stage() -> None:
    # this file's faults (faults/compile.py registers in the same method section)
    assert {f.name for f in catalogue("performance") if f.apply.__module__.endswith(".performance")} == set(NAMES)
    for name, (finding, stage) in NAMES.items():
        f = get_fault(name)
        assert f.expected_ids == (finding,) and f.expected_stage == stage
        assert f.symptom == "slow" and f.section == "Slow training and stalled pipelines"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_faulty_pipeline_trains_to_the_same_numbers(name: str) -> None:
    """Slowness only: the loss of a train step is the clean one, bit for bit."""
    losses = []
    for p in (ReferencePipeline(CFG, [name]), ReferencePipeline(CFG)):
        model = p.build_model(0)
        out = p.train_step(model, p.build_optimizer(model), next(p.loader("train", 0)))
        losses.append(out.loss.item())
    assert losses[0] == losses[1]


# ---- symptoms -------------------------------------------------------------------------------------
# The faults' waits are sleeps. A `FakeClock` stands in for `time` in the faults' module and in their
# pacing (`_pace`): each sleep returns at once and is recorded, and the clock reads this thread's CPU
# time plus what was slept, which a loaded machine does not move. The tests assert where the waits
# fall (which batch, which step, inside `next(loader)` or inside the step), how many there are, and
# their size against the work the fault paces itself on; never a race between wall-clock times.


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return install(monkeypatch, performance, _pace)


def _waits(clock: FakeClock, loader: Iterator[Any], batches: int) -> tuple[np.ndarray, list[list[float]]]:
    """Per batch: the clock's time in `next(loader)`, and the sleeps made during it."""
    waits, sleeps = [], []
    for _ in range(batches):
        start, mark = clock.perf_counter(), clock.mark()
        next(loader)
        waits.append(clock.perf_counter() - start)
        sleeps.append(clock.since(mark))
    return np.array(waits), sleeps


def test_slow_clip_reads_make_the_step_wait_for_data(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch blocks the training process on two reads and two decodes per clip, every epoch
    again (no cache, no prefetch: all of it inside `next(loader)`, none inside the step); the clean
    loader, its clips decoded once, reads nothing while the step waits."""
    cfg = RefConfig(batch_size=8, train_size=16, valid_size=8, segment_seconds=0.5, dim=32, layers=1)
    decodes: list[int] = []
    for module in (performance, pipeline_module):
        real = module.generate_clip
        monkeypatch.setattr(module, "generate_clip",
                            lambda *a, _real=real, **k: decodes.append(1) or _real(*a, **k))

    def per_batch(p: ReferencePipeline, batches: int = 4) -> list[tuple[int, float, int, int]]:
        """Per batch (two epochs): (reads, seconds blocked, decodes) in `next(loader)`, reads in the step."""
        model = p.build_model(0)
        optimizer, loader = p.build_optimizer(model), p.loader("train", 0)
        rows = []
        for _ in range(batches):
            mark, decoded = clock.mark(), len(decodes)
            batch = next(loader)
            reads, decoded = clock.since(mark), len(decodes) - decoded
            mark = clock.mark()
            p.train_step(model, optimizer, batch)
            rows.append((len(reads), sum(reads), decoded, len(clock.since(mark))))
        return rows

    faulty = per_batch(_pipe("slow_clip_reads", cfg))
    reads = 2 * cfg.batch_size  # epochs of train_size // batch_size = 2 batches: batches 3, 4 pay again
    assert [(r, d, s) for r, _, d, s in faulty] == [(reads, reads, 0)] * 4
    assert all(blocked == pytest.approx(reads * READ_LATENCY_S) for _, blocked, _, _ in faulty)
    assert per_batch(_pipe(None, cfg)) == [(0, 0.0, 0, 0)] * 4


def test_slow_worker_delays_every_fourth_batch(clock: FakeClock) -> None:
    waits, sleeps = _waits(clock, _pipe("slow_worker").loader("train", 0), 2 * WORKERS)
    late = [n for n, s in enumerate(sleeps) if s]
    assert late == [WORKERS - 1, 2 * WORKERS - 1] and all(len(sleeps[n]) == 1 for n in late)
    # At least the floor, and the slow worker's batch takes (1 + SLOW_WORKER_FACTOR) x a typical one.
    assert min(sleeps[n][0] for n in late) >= SLOW_WORKER_DELAY_S
    assert waits[late].min() >= (1 + SLOW_WORKER_FACTOR) * np.median(np.delete(waits, late))
    _, clean = _waits(clock, _pipe(None).loader("train", 0), 2 * WORKERS)
    assert not any(clean)


def test_worker_restarts_pause_the_loader_again_and_again(clock: FakeClock) -> None:
    waits, sleeps = _waits(clock, _pipe("worker_restarts").loader("train", 0), RESTART_EVERY + 2)
    restarts = [n for n, s in enumerate(sleeps) if s]
    assert restarts == [0, RESTART_EVERY]  # batches 0 and 8: the pool re-spawned twice
    first_batch = waits[0] - sleeps[0][0]
    for n in restarts:  # at least the floor, and RESTART_FACTOR x the first batch's own work
        assert sleeps[n] == [sleeps[0][0]] and sleeps[n][0] >= max(RESTART_COST_S, RESTART_FACTOR * first_batch)
    _, clean = _waits(clock, _pipe(None).loader("train", 0), RESTART_EVERY + 2)
    assert not any(clean)


def test_checkpoint_stall_blocks_one_step(clock: FakeClock) -> None:
    def blocked(p: ReferencePipeline) -> tuple[list[float], list[list[float]]]:
        """Per step (5 steps): the clock's time in `train_step`, and the sleeps made during it."""
        model = p.build_model(0)
        optimizer, batch = p.build_optimizer(model), next(p.loader("train", 0))
        times, sleeps = [], []
        for _ in range(5):
            start, mark = clock.perf_counter(), clock.mark()
            p.train_step(model, optimizer, batch)
            times.append(clock.perf_counter() - start)
            sleeps.append(clock.since(mark))
        return times, sleeps

    times, sleeps = blocked(_pipe("checkpoint_stall"))
    assert [n for n, s in enumerate(sleeps) if s] == [2]  # the third step uploads, the others do not
    (upload,) = sleeps[2]
    # At least the floor, and STALL_FACTOR x the longest step before it (the fault's own measure of a
    # step is inside the test's, so within this margin): the step is blocked many steps long.
    assert upload >= STALL_S and upload >= 0.9 * STALL_FACTOR * max(times[:2])
    assert not any(blocked(_pipe(None))[1])


def test_per_module_item_sync_forces_a_host_sync_per_module() -> None:
    def host_syncs(p: ReferencePipeline) -> int:
        """`aten::item` calls in one forward step (the backward and the optimizer are left out:
        on CPU, AdamW reads its step counters with `.item()`, which on a GPU run is no sync)."""
        model = p.build_model(0)
        batch = next(p.loader("train", 0))
        with profile() as prof:
            p.step(model, batch)
        return sum(e.count for e in prof.key_averages() if e.key == "aten::item")

    p = _pipe("per_module_item_sync")
    faulty, clean = host_syncs(p), host_syncs(_pipe(None))
    modules = len(list(p.build_model(0).modules()))
    assert clean <= 2 and faulty >= clean + modules - 5  # one per module output (a few are not tensors)
