"""Slow training and stalled pipelines: waiting for data, slow or restarting workers, stalls, syncs.

Every delay here is real wall-clock time (a sleep standing in for I/O, a process spawn, a blocking
upload), kept small so that the catalogue stays fast. The slow worker, the restarts and the stall
are sized against the work they sit in (`_pace`): a worker three times slower than the others, a
re-spawn that costs four first batches, an upload eight steps long, with fixed floors, so that the
fault means the same on a slow machine as on a fast one.
Distributed desynchronisation and stragglers are not injected: the Pipeline protocol has no
multi-process capability through which a detector could see them.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..data import Clip, generate_clip
from ..output import Tap, _no_tap
from ._pace import Pace, timed, timed_call
from ._registry import fault

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..model import MusicLM
    from ..pipeline import Batch, ReferencePipeline

FAMILY = "performance"
SECTION = "Slow training and stalled pipelines"

READ_LATENCY_S = 0.003  # per read, two reads per clip: 48 ms for a batch of 8
SLOW_WORKER_DELAY_S = 0.05  # floor; the slow worker's extra time is SLOW_WORKER_FACTOR × a typical batch
SLOW_WORKER_FACTOR = 2.0
WORKERS = 4
RESTART_EVERY = 8  # batches
RESTART_COST_S = 0.25  # floor; a re-spawn costs RESTART_FACTOR × the first batch
RESTART_FACTOR = 4.0
STALL_S = 0.8  # floor; the upload takes STALL_FACTOR × the longest step before it
STALL_FACTOR = 8.0

log = logging.getLogger(__name__)


@fault(
    "slow_clip_reads",
    FAMILY,
    "waiting for data: every clip is fetched and decoded, twice, inside the training loop",
    SECTION,
    ["perf.data_bound"],
    "loader",
    symptom="slow",
)
def _slow_clip_reads(p: ReferencePipeline) -> None:
    def read(index: int, data_seed: int) -> Clip:
        time.sleep(READ_LATENCY_S)  # a blocking request to remote storage
        return generate_clip(index, data_seed, p.cfg.source_sample_rate)  # the decode

    def make_batch(indices: Sequence[int], seed: int, data_seed: int = 0) -> Batch:
        from ..pipeline import Batch

        clips = []
        for i in indices:
            # Bug: the loader runs in the training process (num_workers=0, no prefetch, no cache)
            # and reads each clip twice: once for the duration probe (`info()` falls back to a
            # full decode for this format) and once for the samples. Every epoch pays again, and
            # the step waits for its batch longer than it computes.
            read(int(i), data_seed)
            clips.append(read(int(i), data_seed))
        return Batch([c.audio for c in clips], p.cfg.source_sample_rate, [c.caption for c in clips],
                     [dict(c.metadata) for c in clips], seed)

    p.make_batch = make_batch  # type: ignore[method-assign]


@fault("slow_worker", FAMILY, "one slow data-loader worker: every fourth batch arrives late",
       SECTION, ["perf.slow_worker"], "loader", symptom="slow")
def _slow_worker(p: ReferencePipeline) -> None:
    loader = p.loader

    def round_robin(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        # Batches come from WORKERS workers in turn, as torch's DataLoader returns them in order.
        pace = Pace()
        for n, batch in enumerate(timed(loader(split, seed), pace)):
            if n % WORKERS == WORKERS - 1:
                # Bug: the last worker's shard sits on a degraded disk (or that worker shares a
                # CPU with the logger): its batches take three times as long as the others', and
                # the in-order loader makes the step wait for it every fourth batch.
                time.sleep(pace.scaled(SLOW_WORKER_FACTOR, SLOW_WORKER_DELAY_S))
            yield batch

    p.loader = round_robin  # type: ignore[method-assign]


@fault("worker_restarts", FAMILY, "data-loader workers restart over and over",
       SECTION, ["perf.worker_restart"], "loader", symptom="slow")
def _worker_restarts(p: ReferencePipeline) -> None:
    loader = p.loader

    def recycling(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        pace = Pace()
        cost = 0.0
        for n, batch in enumerate(timed(loader(split, seed), pace)):
            if n == 0:
                cost = pace.scaled(RESTART_FACTOR, RESTART_COST_S)  # what spawning costs on this machine
            if n % RESTART_EVERY == 0:
                # Bug: workers are recycled every 8 batches (a `max_tasks_per_child`-style limit
                # set to contain a memory leak): each time the pool is torn down and re-spawned,
                # re-imports torch and reopens its files while the step waits.
                time.sleep(cost)
            yield batch

    p.loader = recycling  # type: ignore[method-assign]


@fault("checkpoint_stall", FAMILY, "a stall: the step blocks on a synchronous checkpoint upload",
       SECTION, ["perf.stall"], "runtime", symptom="slow")
def _checkpoint_stall(p: ReferencePipeline) -> None:
    train_step = p.train_step
    steps: weakref.WeakKeyDictionary[torch.optim.Optimizer, Pace] = weakref.WeakKeyDictionary()

    def train_step_with_hook(model: MusicLM, optimizer: torch.optim.Optimizer, batch: Batch,
                             tap: Tap = _no_tap) -> StepOutput:
        pace = steps.setdefault(optimizer, Pace())
        upload = pace.scaled(STALL_FACTOR, STALL_S, Pace.longest)  # a checkpoint is many steps' worth
        out = timed_call(train_step, pace)(model, optimizer, batch, tap)
        if len(pace.seconds) % 50 == 3:
            # Bug: the checkpoint hook (steps 3, 53, 103...) uploads the checkpoint synchronously
            # inside the step instead of handing it to a background thread: that step blocks.
            time.sleep(upload)
        return out

    p.train_step = train_step_with_hook  # type: ignore[method-assign]


@fault("per_module_item_sync", FAMILY, "synchronisation-bound: a host sync after every module, every step",
       SECTION, ["perf.sync_bound"], "runtime", symptom="slow")
def _per_module_item_sync(p: ReferencePipeline) -> None:
    build_model = p.build_model

    def watch(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # Bug: an activation watchdog left on from a NaN hunt: it calls `.item()` on every
        # module's output, forcing the host to wait for the device dozens of times per step (on
        # a GPU each call drains the queue; here each is an `aten::item` host round trip).
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            peak = output.detach().abs().max().item()
            if not math.isfinite(peak):
                log.warning("non-finite activation in %s", type(module).__name__)

    def build(seed: int) -> MusicLM:
        model = build_model(seed)
        for module in model.modules():
            module.register_forward_hook(watch)
        return model

    p.build_model = build  # type: ignore[method-assign]
