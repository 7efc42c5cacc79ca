"""The local engine: the files measured in this process, or in `workers` spawned processes.

In processes, a worker that dies (a decoder's segfault, the kernel's out-of-memory killer) breaks the
whole pool, and every chunk in flight fails with it, so none of them can be blamed. Those chunks'
files become suspects: each is measured again alone, one at a time, in a fresh pool, where a death is
that file's own. A file that dies alone 1 + `retries` times is `file.lost`, as on Ray
(`ray_engine.py`); everything measured before stands. In this process (`workers` 1) nothing can
survive a crash: `--workers 2` or `--engine ray` isolate the decoders.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..records.audit import Item, Measure
from .measure import INJECT_ENV, LOST, Task, measure_batch

__all__ = ["dispatch_local", "RETRIES"]

RETRIES = 2  # as on Ray: a file whose worker dies 1 + RETRIES times measuring it alone is lost
IN_FLIGHT = 4  # chunks a worker: memory stays flat on any size

Take = Callable[[int, Item, Measure | None], None]
Result = list[tuple[int, Item, Measure | None]]


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))


def dispatch_local(chunks: list[list[Task]], workers: int, take: Take, progress: Any,
                   retries: int = RETRIES) -> dict[str, Any]:
    """Measure every chunk, feeding each file's result to `take`; returns the engine's figures."""
    info: dict[str, Any] = {"engine": "local", "workers": workers}
    if workers <= 1:
        for chunk in chunks:
            for n, item, m in measure_batch(chunk):
                take(n, item, m)
            progress.advance(len(chunk))
        return info
    queue: deque[list[Task]] = deque(chunks)
    suspects: deque[Task] = deque()  # files of chunks a dead worker took down: each measured alone
    deaths: Counter[int] = Counter()
    lost: list[str] = []
    pool_deaths = 0
    running: dict[Future[Result], list[Task]] = {}
    pool = _pool(workers)
    inject = os.environ.get(INJECT_ENV, "")

    def give(batch: Result) -> None:
        for n, item, m in batch:
            take(n, item, m)
        progress.advance(len(batch))

    def died(chunk: list[Task], alone: bool) -> None:
        if not (alone and len(chunk) == 1):
            suspects.extend(chunk)
            return
        n, item, _ = chunk[0]
        deaths[n] += 1
        if deaths[n] > retries:
            take(n, item, Measure(problem=f"{LOST}its worker process died {deaths[n]} times while measuring it "
                                           "alone; nothing of it was measured"))
            progress.advance(1)
            lost.append(item.ref)
        else:
            suspects.appendleft(chunk[0])

    finished = False
    try:
        while queue or suspects or running:
            if suspects:  # one file at a time: a death is then that file's
                if not running:
                    one = [suspects.popleft()]
                    running[pool.submit(measure_batch, one, inject)] = one
            else:
                while queue and len(running) < IN_FLIGHT * workers:
                    chunk = queue.popleft()
                    running[pool.submit(measure_batch, chunk, inject)] = chunk
            alone = len(running) == 1
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            broken = False
            for fut in done:
                chunk = running.pop(fut)
                try:
                    give(fut.result())
                except BrokenProcessPool:
                    broken = True
                    died(chunk, alone)
            if broken:  # the pool is gone: what it still held failed with it, or had finished
                pool_deaths += 1
                for fut, chunk in list(running.items()):
                    try:
                        give(fut.result(timeout=60))
                    except Exception:  # noqa: BLE001 - BrokenProcessPool, or a result lost with the pool
                        died(chunk, False)
                running.clear()
                pool.shutdown(wait=False, cancel_futures=True)
                pool = _pool(workers)
        finished = True
    finally:  # Ctrl-C or an error: nothing waits for the chunks still queued
        pool.shutdown(wait=finished, cancel_futures=not finished)
    info.update(worker_deaths=pool_deaths, lost=lost)
    return info
