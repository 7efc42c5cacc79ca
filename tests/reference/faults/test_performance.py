"""The performance faults: each makes the run wait where its bug would, and the clean run does not.

Symptoms are measured with wall clocks around `next(loader)` and `train_step`, and with the torch
profiler's op counts, never through a signalchain detector. The faults' delays are tens of
milliseconds; the assertions leave room for a loaded machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.profiler import profile

from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import catalogue, get_fault
from signalchain.reference.faults.performance import (
    READ_LATENCY_S,
    RESTART_COST_S,
    RESTART_EVERY,
    SLOW_WORKER_DELAY_S,
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


def _loader_waits(loader: Iterator[Any], batches: int) -> np.ndarray:
    waits = []
    for _ in range(batches):
        start = time.perf_counter()
        next(loader)
        waits.append(time.perf_counter() - start)
    return np.array(waits)


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

def test_slow_clip_reads_make_the_step_wait_for_data() -> None:
    cfg = RefConfig(batch_size=8, train_size=16, valid_size=8, segment_seconds=0.5, dim=32, layers=1)

    def waits_and_steps(p: ReferencePipeline) -> tuple[float, float]:
        """Fastest of 4 batches: wall time in `next(loader)` and in `train_step` (the minimum,
        because a loaded machine only ever adds time)."""
        model = p.build_model(0)
        optimizer = p.build_optimizer(model)
        loader = p.loader("train", 0)
        p.train_step(model, optimizer, next(loader))  # warm-up
        waits, steps = [], []
        for _ in range(4):
            start = time.perf_counter()
            batch = next(loader)
            waits.append(time.perf_counter() - start)
            start = time.perf_counter()
            p.train_step(model, optimizer, batch)
            steps.append(time.perf_counter() - start)
        return min(waits), min(steps)

    wait, step = waits_and_steps(_pipe("slow_clip_reads", cfg))
    assert wait >= 2 * cfg.batch_size * READ_LATENCY_S
    assert wait > step  # data-bound: the step waits for its batch longer than it computes
    clean_wait, clean_step = waits_and_steps(_pipe(None, cfg))
    assert clean_wait < 0.2 * clean_step


def test_slow_worker_delays_every_fourth_batch() -> None:
    waits = _loader_waits(_pipe("slow_worker").loader("train", 0), 2 * WORKERS)
    slow = waits[WORKERS - 1 :: WORKERS]
    fast = np.delete(waits, np.arange(WORKERS - 1, len(waits), WORKERS))
    assert slow.min() >= 0.9 * SLOW_WORKER_DELAY_S and np.median(fast) < 0.3 * SLOW_WORKER_DELAY_S
    assert _loader_waits(_pipe(None).loader("train", 0), 2 * WORKERS).max() < 0.5 * SLOW_WORKER_DELAY_S


def test_worker_restarts_pause_the_loader_again_and_again() -> None:
    waits = _loader_waits(_pipe("worker_restarts").loader("train", 0), RESTART_EVERY + 2)
    restarts = waits[::RESTART_EVERY]  # batches 0 and 8
    assert len(restarts) == 2 and restarts.min() >= 0.9 * RESTART_COST_S
    assert np.median(np.delete(waits, np.arange(0, len(waits), RESTART_EVERY))) < 0.1 * RESTART_COST_S
    assert _loader_waits(_pipe(None).loader("train", 0), RESTART_EVERY + 2).max() < 0.5 * RESTART_COST_S


def test_checkpoint_stall_blocks_one_step() -> None:
    def blocked_times(p: ReferencePipeline) -> np.ndarray:
        """Per step, wall time minus CPU time: how long the step sat blocked (load adds little)."""
        model = p.build_model(0)
        optimizer, batch = p.build_optimizer(model), next(p.loader("train", 0))
        times = []
        for _ in range(5):
            wall, cpu = time.perf_counter(), time.process_time()
            p.train_step(model, optimizer, batch)
            times.append((time.perf_counter() - wall) - (time.process_time() - cpu))
        return np.array(times[1:])  # the first step warms torch up

    blocked = blocked_times(_pipe("checkpoint_stall"))  # steps 2..5: the third one is step 3
    assert blocked[1] >= 0.9 * STALL_S and np.delete(blocked, 1).max() < 0.5 * STALL_S
    assert blocked_times(_pipe(None)).max() < 0.5 * STALL_S


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
