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


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    """One fake clock for the family's timer, the catalogue's faults (and their pacing) and the bugs
    written here; with no run-queue delay, the family judges instead of calling the machine busy."""
    clock = install(monkeypatch, measuring, faults, _pace, sys.modules[__name__])
    monkeypatch.setattr(measuring, "run_queue_delay", lambda: 0.0)
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
    assert len(rows) == 17 and all(isinstance(row[1], float) and row[2] > 0 for row in rows)
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
