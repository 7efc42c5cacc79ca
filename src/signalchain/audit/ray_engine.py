"""The audit on a Ray cluster (`signalchain audit --engine ray`): the same per-file work, as Ray tasks.

Each task measures a chunk of files with `measure.measure_batch`, the function the local pool runs,
and *streams* its results: a start marker, then one result per file as it is measured. The driver
therefore knows which file a task is on at any moment, which gives the two fault rules:

- a worker that dies (killed, out of memory, a decoder's segfault, a lost node) costs nothing already
  streamed; the file it was on is retried alone and the rest of the chunk is sent again (a result
  streams back a moment after it is made, so a death is charged to a file only when it was alone),
  and a file whose worker dies `1 + retries` times measuring it alone is named as `file.lost`;
- a file measured for longer than `file_timeout` seconds (timed from when its task reached that file,
  never while the task waited for a CPU) has its worker stopped and is named as `file.lost`; it is
  not retried (a hang costs the whole timeout again), the rest of its chunk is sent again.

Ctrl-C cancels every task in flight (their workers are stopped) and the audit ends with what was
measured written to the fingerprint cache. The cache and the judges stay in the driver, as in the
local engine: the results (and so the findings, JSON and HTML) do not depend on the engine.

The driver must be able to read the dataset (it reads the manifests and stats files to check the
cache); the workers must reach the same paths and import signalchain (`pip install signalchain[ray]`
on every node, or a Ray runtime environment that installs it).

`SIGNALCHAIN_AUDIT_INJECT` (`measure.inject_fault`) puts a real fault into the workers, to prove a
cluster's set-up and these rules.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._units import plural
from ..errors import UsageError
from ..records.audit import Item, Measure
from .measure import INJECT_ENV, LOST, TIMED_OUT, Task, measure_batch
from .pool_engine import RETRIES  # one rule for both engines
from .search import ShardRunner, search_shard

__all__ = ["RayStats", "dispatch_ray", "connect", "shard_runner", "INJECT_ENV", "RETRIES", "FILE_TIMEOUT"]

FILE_TIMEOUT = 300.0  # seconds one file may take (a 1-hour file takes about 2 s at 1,800x real time)
CONNECT_TIMEOUT = 10.0  # seconds a cluster's head may take to accept a connection
POLL_S = 0.25  # how often the driver looks at deadlines while nothing arrives
RATE_EVERY_S = 2.0  # how often the progress line's files-per-second figure is renewed

Take = Callable[[int, Item, Measure | None], None]


@dataclass
class RayStats:
    """What the engine did, for the report's `engine` block."""

    address: str = ""
    nodes: int = 0
    cpus: int = 0
    tasks: int = 0
    worker_deaths: int = 0
    retried_files: int = 0
    lost: list[str] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)
    files: int = 0
    seconds: float = 0.0
    driver_cpu: float = 0.0  # CPU seconds of the driver's process while the files were measured

    def where(self) -> str:
        return f"{plural(self.cpus, 'CPU')} on {plural(self.nodes, 'node')}"

    def as_dict(self) -> dict[str, Any]:
        return {"engine": "ray", "address": self.address, "nodes": self.nodes, "cpus": self.cpus,
                "tasks": self.tasks, "worker_deaths": self.worker_deaths, "retried_files": self.retried_files,
                "lost": list(self.lost), "hung": list(self.hung),
                "files": self.files, "seconds": round(self.seconds, 2),
                "files_per_second": round(self.files / self.seconds, 1) if self.seconds else None,
                # The driver judges and caches every file: past 1 / this many files a second it is the limit.
                "driver_cpu_ms_per_file": round(1000 * self.driver_cpu / self.files, 2) if self.files else None}


def _measure_stream(batch: list[Task], inject: str = "") -> Iterator[object]:
    """The Ray task: a start marker, then each file's `(number, item, measure)` as soon as it is done.
    `inject` is the driver's SIGNALCHAIN_AUDIT_INJECT (passed along: a worker's environment is the node's)."""
    yield "start"
    for task in batch:
        yield measure_batch([task], inject)[0]


def connect(address: str | None, cpus: int) -> tuple[Any, bool, str]:
    """(ray, started, where): join the cluster at `address` (or $RAY_ADDRESS), or start a local Ray with
    `cpus` CPUs when neither is given. `started` says whether this audit must shut Ray down."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError("--engine ray needs Ray: pip install 'signalchain[ray]'") from exc
    if ray.is_initialized():
        return ray, False, "the Ray this process already joined"
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    if address:
        _reachable(address)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=max(1, cpus), **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise UsageError(f"--engine ray: cannot start or join {where} "
                         f"({type(exc).__name__}: {str(exc)[:300]})") from exc
    return ray, True, address or f"local Ray started for this audit ({max(1, cpus)} CPUs)"


def _reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Ray waits forever for a head that does not answer: a HOST:PORT (or ray://HOST:PORT) address is
    tried first, and one that refuses or stays silent is a usage error within `timeout` seconds."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local" or another form Ray resolves (and reports) itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"--engine ray: cannot start or join the Ray cluster at {address} (nothing answers "
                         f"there within {timeout:g} s: {exc}); start it with `ray start --head` or fix --address "
                         "or RAY_ADDRESS") from exc


@dataclass
class _Running:
    tasks: deque[Task]  # not yet streamed back, in order: the first is the one being measured
    size: int = 0  # files the task was given
    since: float | None = None  # when the task reached its current file (None: not started yet)


class _Driver:
    def __init__(self, ray: Any, take: Take, progress: Any, retries: int, file_timeout: float, stats: RayStats):
        self.ray, self.take, self.progress = ray, take, progress
        self.retries, self.timeout, self.stats = retries, file_timeout, stats
        self.remote = ray.remote(num_returns="streaming", max_retries=0, num_cpus=1)(_measure_stream)
        self.inject = os.environ.get(INJECT_ENV, "")
        self.queue: deque[list[Task]] = deque()
        self.running: dict[Any, _Running] = {}
        self.deaths: Counter[int] = Counter()  # item number -> workers that died on it
        self.done = 0
        self.any_result = False
        self.t0 = self.t_rate = time.monotonic()
        self.done_rate = 0

    def submit(self, chunk: list[Task]) -> None:
        first = os.path.basename(chunk[0][1].path or "") or f"item {chunk[0][0]}"
        gen = self.remote.options(name=f"signalchain-audit:{first[:60]}").remote(chunk, self.inject)
        self.running[gen] = _Running(deque(chunk), len(chunk))
        self.stats.tasks += 1

    def give(self, n: int, item: Item, m: Measure | None) -> None:
        self.take(n, item, m)
        self.done += 1
        self.progress.advance(1)

    def lose(self, task: Task, why: str, hung: bool = False) -> None:
        n, item, _ = task
        self.give(n, item, Measure(problem=(TIMED_OUT if hung else LOST) + why))
        (self.stats.hung if hung else self.stats.lost).append(item.ref)

    def failed(self, run: _Running, exc: BaseException) -> None:
        """A task ended without streaming all its files. A chunk's files are sent again (the first alone);
        a file's own task dying 1 + retries times makes it lost."""
        if isinstance(exc, self.ray.exceptions.RayTaskError) and not self.any_result:
            raise UsageError(f"--engine ray: the workers cannot run signalchain's task ({str(exc)[:400]}); "
                             "install signalchain[ray] on every node (or give Ray a runtime environment that does)")
        self.stats.worker_deaths += 1
        if not run.tasks:
            return
        first, rest = run.tasks[0], list(run.tasks)[1:]
        if run.size > 1:
            # It died on `first`, or on a later file whose predecessors' results had not streamed back
            # yet: no file of a chunk is blamed. `first` runs alone next, the others as a chunk again.
            self.stats.retried_files += 1
            if rest:
                self.queue.appendleft(rest)
            self.queue.appendleft([first])
            return
        self.deaths[first[0]] += 1  # a task of this one file: its death is the file's
        if self.deaths[first[0]] > self.retries:
            self.lose(first, f"its worker died {plural_times(self.deaths[first[0]])} while measuring it alone "
                             f"({type(exc).__name__}); nothing of it was measured")
        else:
            self.queue.appendleft([first])

    def step(self, limit: int) -> None:
        while self.queue and len(self.running) < limit:
            self.submit(self.queue.popleft())
        if not self.running:
            return
        gens = list(self.running)
        ready, _ = self.ray.wait(gens, num_returns=1, timeout=POLL_S)
        if ready and len(gens) > 1:  # every task with a result waiting, in one call rather than one call each
            ready, _ = self.ray.wait(gens, num_returns=len(gens), timeout=0)
        for gen in ready:
            run = self.running[gen]
            try:
                value = self.ray.get(next(gen))
            except StopIteration:
                del self.running[gen]
                if run.tasks:  # ended without all its files: as if its worker had died
                    self.failed(run, RuntimeError("the task ended early"))
                continue
            except self.ray.exceptions.RayError as exc:
                del self.running[gen]
                self.failed(run, exc)
                continue
            now = time.monotonic()
            if isinstance(value, str):  # the start marker
                run.since = now
                continue
            n, item, m = value
            run.tasks.popleft()
            run.since = now
            self.any_result = True
            self.give(n, item, m)
        self.deadlines()
        self.rate()

    def deadlines(self) -> None:
        now = time.monotonic()
        for gen, run in list(self.running.items()):
            if run.since is None or not run.tasks or now - run.since <= self.timeout:
                continue
            self.ray.cancel(gen, force=True)  # stops its worker
            del self.running[gen]
            self.lose(run.tasks.popleft(), f"decoding did not finish in {self.timeout:g} s; its worker was stopped "
                                           "(a file that hangs its decoder, or a node too busy to measure it: "
                                           "decode it alone to tell)", hung=True)
            if run.tasks:
                self.queue.appendleft(list(run.tasks))

    def rate(self) -> None:
        now = time.monotonic()
        if now - self.t_rate >= RATE_EVERY_S and self.done:  # before the first file: the workers are starting
            speed = (self.done - self.done_rate) / (now - self.t_rate)
            shown = f"{speed:,.1f}" if speed < 10 else f"{speed:,.0f}"
            self.progress.say(f"measuring on Ray: {shown} files/s across {self.stats.where()}")
            self.t_rate, self.done_rate = now, self.done

    def cancel_all(self) -> None:
        for gen in list(self.running):
            try:
                self.ray.cancel(gen, force=True)
            except Exception:  # noqa: BLE001 - a task that ended meanwhile: nothing to stop
                pass
        self.running.clear()


def plural_times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def shard_runner(ray: Any, retries: int = RETRIES) -> ShardRunner:
    """The sharded search's shards as parallel Ray tasks: the queries are put in the object store once,
    each task builds one shard's index where it runs (so no machine holds more than one shard's index)."""
    remote = ray.remote(num_cpus=1, max_retries=retries)(search_shard)

    def run(shards: list[tuple[np.ndarray, np.ndarray]], queries: np.ndarray,
            k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        qref = ray.put(queries)
        # At most one shard task per CPU in flight, each shard sent as stored (float16): the object
        # store never holds a copy of every indexed vector at once.
        width = max(1, int(ray.cluster_resources().get("CPU", 1)))
        flight: deque[Any] = deque()
        todo = iter(shards)
        for v, o in todo:
            flight.append(remote.remote(v, o, qref, k, 1))
            if len(flight) >= width:
                break
        while flight:
            got = ray.get(flight.popleft())  # in the shards' order: the merge breaks ties as one index would
            nxt = next(todo, None)
            if nxt is not None:
                flight.append(remote.remote(nxt[0], nxt[1], qref, k, 1))
            yield got

    return run


def dispatch_ray(ray: Any, where: str, chunks: list[list[Task]], take: Take, progress: Any, *,
                 retries: int = RETRIES, file_timeout: float = FILE_TIMEOUT) -> RayStats:
    """Measure every chunk on the Ray that `connect` joined, feeding each result to `take` as it
    arrives; see the module docstring."""
    stats = RayStats(address=where)
    t0, cpu0 = time.monotonic(), time.process_time()
    driver: _Driver | None = None
    try:
        stats.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        stats.nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        progress.say(f"measuring on Ray: {stats.where()}")
        driver = _Driver(ray, take, progress, retries, file_timeout, stats)
        # Chunks small enough that every CPU gets two (a small dataset on a big cluster), at most as given.
        tasks = [t for chunk in chunks for t in chunk]
        size = max(1, min(max(map(len, chunks), default=1), math.ceil(len(tasks) / (2 * stats.cpus))))
        driver.queue.extend(tasks[i : i + size] for i in range(0, len(tasks), size))
        limit = 2 * stats.cpus  # a task waiting per CPU keeps every worker fed; waiting is never timed
        while driver.queue or driver.running:
            driver.step(limit)
        spent = max(time.monotonic() - t0, 1e-9)
        progress.say(f"measured {driver.done:,} files on Ray: {driver.done / spent:,.1f} files/s "
                     f"across {stats.where()}")
    except BaseException:
        if driver is not None:
            driver.cancel_all()  # Ctrl-C or an error: no task keeps running for nobody
        raise
    finally:
        stats.seconds = time.monotonic() - t0
        stats.driver_cpu = time.process_time() - cpu0
        stats.files = driver.done if driver is not None else 0
    return stats
