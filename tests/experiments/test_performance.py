"""The performance family on the reference pipeline: silent when clean, and each slowdown found with
the right id and stage — the catalogue's faults and bugs written here in other ways, so the
detectors are proven on implementations they were not tuned to.

Every injected delay is large against the thresholds (a whole update is ~50 ms here); no test
asserts how fast our own code runs. The family reads a fake clock here (`tests/_clock.py`: this
thread's CPU time plus the seconds slept, each sleep recorded and returned at once, no run-queue
delay): on a loaded machine the wall clock stretched the clean steps and the waits unevenly, and the
slow worker and the flushing logger went unseen in a full `make test` beside other work.
"""

import ctypes
import sys
import time

import pytest
import torch

from _clock import install
from signalchain.experiments import performance as measuring
from signalchain.experiments.context import Budget
from signalchain.experiments.doctor import run_doctor
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline
from signalchain.reference.faults import _pace
from signalchain.reference.faults import performance as faults

SMALL = RefConfig(batch_size=4)


def _openblas():
    """numpy's OpenBLAS, loaded in this process (Linux), for setting its thread count; or None."""
    try:
        paths = {line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()}
        for path in paths:
            lib = ctypes.CDLL(path)
            for get, put in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                             ("openblas_get_num_threads", "openblas_set_num_threads")):
                if hasattr(lib, get) and hasattr(lib, put):
                    return getattr(lib, get), getattr(lib, put)
    except OSError:
        pass
    return None


class QuietThreads:
    """The family's thread clock on the fake clock: the thread's real CPU time (what the fake clock
    advances by, besides sleeps) and a run-queue delay of `queued` seconds (0 unless a test's
    pipeline is preempted), no other thread's."""

    queued = 0.0

    def thread(self):
        return time.thread_time(), QuietThreads.queued

    def others(self):
        return 0.0

    def close(self):
        pass


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    """One fake clock for the family's timer, the catalogue's faults (and their pacing) and the bugs
    written here; with no run-queue delay, no update is said to have waited for a CPU."""
    clock = install(monkeypatch, measuring, faults, _pace, sys.modules[__name__])
    monkeypatch.setattr(measuring, "ThreadClock", QuietThreads)
    monkeypatch.setattr(QuietThreads, "queued", 0.0)
    return clock


@pytest.fixture(autouse=True)
def one_thread():
    """One torch and one BLAS thread, as `signalchain faults` runs its workers. On a shared 2-core
    box, threads that spin-wait on each other make an update over ten times slower and mostly
    spent waiting for a CPU, which the family then reports as a busy machine instead of judging."""
    n = torch.get_num_threads()
    blas = _openblas()
    m = blas[0]() if blas else None
    torch.set_num_threads(1)
    if blas:
        blas[1](1)
    yield
    torch.set_num_threads(n)
    if blas:
        blas[1](m)


def doctor(pipeline, steps, seed=0, sync_steps=1):
    return run_doctor(ProtocolView(pipeline), families=["performance"], seed=seed,
                      budget=Budget(perf_steps=steps, perf_sync_steps=sync_steps))


def warnings_of(result):
    return sorted({(f.id, f.stage) for f in result.findings if f.severity.value != "info"})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_reference_is_silent(seed):
    r = doctor(ReferencePipeline(SMALL), steps=17, seed=seed, sync_steps=2)
    assert warnings_of(r) == [], [f.message for f in r.findings]
    assert r.families == ["performance"]
    rows = r.metrics["performance.updates"]["rows"]
    assert len(rows) == 17 + Budget().perf_reread and all(isinstance(row[1], float) and row[2] > 0 for row in rows)
    assert {"update (compute)", "waiting for the batch"} <= set(r.metrics["performance.timeline"]["series"])
    (summary,) = [f for f in r.findings if f.id == "perf.summary"]
    assert summary.evidence["syncs_per_update"] < 8


@pytest.mark.parametrize("fault,steps,expected", [
    ("slow_clip_reads", 6, ("perf.data_bound", "loader")),
    ("slow_worker", 17, ("perf.slow_worker", "loader")),
    ("worker_restarts", 17, ("perf.worker_restart", "loader")),
    ("checkpoint_stall", 5, ("perf.stall", "runtime")),
    ("per_module_item_sync", 3, ("perf.sync_bound", "runtime")),
])
def test_catalogue_faults_are_found_and_placed(fault, steps, expected):
    r = doctor(ReferencePipeline(SMALL).with_faults([fault]), steps=steps)
    assert expected in warnings_of(r), [f.message for f in r.findings]
    assert [f for f in r.findings if f.severity.value == "error"] == []


class FetchEveryBatch(ReferencePipeline):
    """Each batch is fetched from an object store by the training process, one request per batch."""

    def loader(self, split="train", seed=0):
        for batch in super().loader(split, seed):
            time.sleep(0.25)  # the round trip, paid in full before every update
            yield batch


class TokenStatsSync(ReferencePipeline):
    """Logs per-example, per-codebook accuracy and a token histogram inside the step."""

    def step(self, model, batch, tap=lambda s, v, **m: v):
        out = super().step(model, batch, tap)
        pred = out.logits.detach().argmax(-1)  # [B, K, T]
        self.stats = []
        for b in range(pred.shape[0]):
            for k in range(pred.shape[1]):
                hit = (pred[b, k] == out.targets[b, k]).float().mean().item()
                self.stats.append((hit, len(set(out.targets[b, k].tolist()))))
        return out


class TwoShards(ReferencePipeline):
    """Two loader workers in turn; the second one's shard sits on a slow network mount."""

    def loader(self, split="train", seed=0):
        for n, batch in enumerate(super().loader(split, seed)):
            if n % 2 == 1:
                time.sleep(0.15)
            yield batch


class FlushingLogger(ReferencePipeline):
    """Every fifth update writes its metrics and waits for the remote logger to acknowledge."""

    calls = 0

    def step(self, model, batch, tap=lambda s, v, **m: v):
        out = super().step(model, batch, tap)
        self.calls += 1
        if self.calls % 5 == 0 and torch.is_grad_enabled():
            time.sleep(0.6)
        return out


@pytest.mark.parametrize("bug,steps,expected", [
    (FetchEveryBatch, 6, ("perf.data_bound", "loader")),
    (TokenStatsSync, 3, ("perf.sync_bound", "runtime")),
    (TwoShards, 10, ("perf.slow_worker", "loader")),
    (FlushingLogger, 8, ("perf.stall", "runtime")),
])
def test_bugs_written_here_are_found(bug, steps, expected):
    r = doctor(bug(SMALL), steps=steps)
    found = warnings_of(r)
    assert expected in found, [f.message for f in r.findings]
    if bug is TokenStatsSync:
        (f,) = [f for f in r.findings if f.id == "perf.sync_bound"]
        assert f.evidence["syncs_per_update"] >= 32 and "test_performance.py" in f.hint
    if bug is TwoShards:
        (f,) = [f for f in r.findings if f.id == "perf.slow_worker"]
        assert f.evidence["period"] == 2 and f.evidence["residue"] == 1


def _preempt(seconds):
    """Stand in for other processes holding the cores: the thread is off a CPU, runnable, for
    `seconds` (the fake clock advances, and the thread's run-queue delay with it)."""
    time.sleep(seconds)
    QuietThreads.queued += seconds


def busy(base, factor=3.0):
    """`base` on a machine where other processes hold the cores: every batch and every step takes
    `factor` times its own time more, spent waiting for a CPU (load ≈ 1 + factor per core)."""

    class Busy(base):
        def loader(self, split="train", seed=0):
            it = iter(super().loader(split, seed))
            while True:
                t0 = time.perf_counter()
                batch = next(it)
                _preempt(factor * (time.perf_counter() - t0))
                yield batch

        def step(self, model, batch, tap=lambda s, v, **m: v):
            c0 = time.thread_time()
            out = super().step(model, batch, tap)
            _preempt(factor * (time.thread_time() - c0))
            return out

    Busy.__name__ = f"Busy{base.__name__}"
    return Busy


def test_a_busy_machine_is_taken_out_of_every_time():
    """Three quarters of every wait and step spent queued for a CPU: the old judge dropped every update
    and said only `perf.machine_busy`; now the clean run is silent and the data-bound one named."""
    r = doctor(busy(ReferencePipeline)(SMALL), steps=9)
    assert warnings_of(r) == [], [f.message for f in r.findings]
    assert "perf.machine_busy" not in {f.id for f in r.findings}
    (summary,) = [f for f in r.findings if f.id == "perf.summary"]
    assert summary.evidence["queued_share"] > 0.5 and "taken out" in summary.message
    r = doctor(busy(FetchEveryBatch)(SMALL), steps=9)
    assert ("perf.data_bound", "loader") in warnings_of(r), [f.message for f in r.findings]


class DecodeOnFirstAccess(ReferencePipeline):
    """Each clip is fetched and decoded (60 ms) the first time it is read, then served from memory:
    the first epoch waits, later ones do not."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.decoded = set()

    def make_batch(self, indices, seed, data_seed=0):
        for i in indices:
            if (int(i), data_seed) not in self.decoded:
                time.sleep(0.06)
                self.decoded.add((int(i), data_seed))
        return super().make_batch(indices, seed, data_seed)


def test_a_cache_filling_on_the_first_pass_is_a_cold_start_not_data_bound(fake_clock):
    r = doctor(DecodeOnFirstAccess(SMALL), steps=9)
    assert warnings_of(r) == [], [f.message for f in r.findings]
    (cold,) = [f for f in r.findings if f.id == "perf.cold_start"]
    assert cold.evidence["second_pass"] and cold.evidence["cold_wait_ms"] >= 4 * 60
    rows = r.metrics["performance.updates"]["rows"]
    assert [row[-1] for row in rows] == [1] * 9 + [2] * Budget().perf_reread
    # the same loader without its cache is data bound: the second pass waits as long as the first
    r = doctor(ReferencePipeline(SMALL).with_faults(["slow_clip_reads"]), steps=9)
    assert ("perf.data_bound", "loader") in warnings_of(r)
    assert "perf.cold_start" not in {f.id for f in r.findings}


def test_a_pipeline_without_a_loader_is_still_timed(toy):
    r = run_doctor(toy, families=["performance"], budget=Budget(perf_steps=4, perf_sync_steps=1))
    ids = {f.id for f in r.findings}
    assert "pipeline.capability_missing" in ids and "perf.summary" in ids
    assert not [f for f in r.findings if f.severity.value != "info"]
    assert "waiting for the batch" not in r.metrics["performance.timeline"]["series"]


LIBRARY_CODE = '''
def pad_like_encodec(x, n):
    """Reads a value on the host on every call, as HF's Encodec reads its paddings."""
    total = 0.0
    for _ in range(n):
        total += float(x.abs().max())
    return total
'''


@pytest.fixture
def fake_library(tmp_path, monkeypatch):
    """A module installed under a `site-packages` folder: third-party code the user cannot edit."""
    root = tmp_path / "site-packages"
    root.mkdir()
    (root / "fakecodec.py").write_text(LIBRARY_CODE)
    monkeypatch.syspath_prepend(str(root))
    import importlib

    return importlib.import_module("fakecodec")


def _reads_in(reader, n=40):
    class ReadsInStep(ReferencePipeline):
        def step(self, model, batch, tap=lambda s, v, **m: v):
            out = super().step(model, batch, tap)
            reader(out.logits.detach(), n)  # line that calls into the reader
            return out

    return ReadsInStep(SMALL)


def test_host_reads_inside_a_library_are_info_with_the_users_call(fake_library):
    r = doctor(_reads_in(fake_library.pad_like_encodec), steps=3)
    assert warnings_of(r) == [], [f.message for f in r.findings]
    (info,) = [f for f in r.findings if f.id == "perf.sync_bound"]
    assert info.severity.value == "info" and info.evidence["owner"] == "library"
    assert info.evidence["library_syncs_per_update"] >= 40
    assert "fakecodec.py" in info.hint and "test_performance.py" in info.hint  # the library line and the call


def test_the_same_reads_in_the_users_own_code_are_a_warning():
    def pad_like_encodec(x, n):  # the same code, written in the user's file
        return sum(float(x.abs().max()) for _ in range(n))

    r = doctor(_reads_in(pad_like_encodec), steps=3)
    assert ("perf.sync_bound", "runtime") in warnings_of(r)
    (f,) = [f for f in r.findings if f.id == "perf.sync_bound"]
    assert f.evidence["owner"] == "user" and "test_performance.py" in f.hint


def test_pool_threads_that_queued_get_the_update_timed_again_on_one_thread(monkeypatch):
    """Where the pool threads queued (forced here: the decision reads /proc's run-queue delays), a few
    updates are timed again on one intra-op thread, and the user's thread count is given back."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(measuring, "_pool_queued", lambda rep: True)
    torch.set_num_threads(2)
    try:
        from signalchain.experiments.context import Context

        rep = measuring.time_updates(Context(pipeline=ReferencePipeline(SMALL), seed=0), steps=3)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    if measuring.run_queue_delay(None) is None:
        pytest.skip("no run-queue delay on this OS: nothing to time on one thread")
    assert len(rep.one_thread) == measuring.ONE_THREAD_UPDATES and all(t > 0 for t in rep.one_thread)
