"""The HF bed's performance faults: the waits the loader and the steps make (a fake clock records
the faults' sleeps: `tests/_clock.py`), and the host reads (value reads of tensors) a forward makes,
counted at the aten level."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import soxr
import torch
from hf_bed_support import check_registered, setup
from torch.utils._python_dispatch import TorchDispatchMode

from _clock import FakeClock, install
from signalchain.reference.faults import _pace
from signalchain.reference.hf.faults import performance
from signalchain.reference.hf.faults.performance import READ_LATENCY_S, STALL_FACTOR, STALL_S

torch.set_num_threads(1)

NAMES = {"audio_decoded_on_every_access", "isfinite_assert_hooks", "blocking_checkpoint_push"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("performance", NAMES, "Slow training and stalled pipelines")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The faults' sleeps recorded, not slept (`tests/_clock.py`): no assertion races the wall clock."""
    return install(monkeypatch, performance, _pace)


def test_audio_decoded_on_every_access_blocks_every_batch_on_reads(bed, clock, monkeypatch) -> None:
    """Each batch blocks on two reads and two resamplings per example, inside `next(loader)`, every
    batch again; the clean loader reads and resamples nothing there."""
    resampled: list[int] = []
    monkeypatch.setattr(performance, "soxr", SimpleNamespace(
        resample=lambda *a, **k: resampled.append(1) or soxr.resample(*a, **k)))

    def per_batch(p, batches: int = 3) -> list[tuple[int, float, int]]:
        it, rows = p.loader("train"), []
        for _ in range(batches):
            mark, done = clock.mark(), len(resampled)
            batch = next(it)
            reads = clock.since(mark)
            rows.append((len(reads), sum(reads), len(resampled) - done, len(batch.examples)))
        return rows

    faulty = per_batch(bed.with_faults(["audio_decoded_on_every_access"]))
    assert all(reads == resamples == 2 * n and n > 0 for reads, _, resamples, n in faulty)
    assert all(blocked == pytest.approx(reads * READ_LATENCY_S) for reads, blocked, _, _ in faulty)
    assert [row[:3] for row in per_batch(bed)] == [(0, 0.0, 0)] * 3


class _ScalarReads(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _reads(p, golden) -> int:
    model, _ = setup(p)
    with _ScalarReads() as mode, torch.no_grad():
        p.forward(model, *p.tokenize(golden.captions), p.step(model, golden).targets)
    return mode.n


def test_isfinite_assert_hooks_read_a_value_after_every_module(bed, golden) -> None:
    p = bed.with_faults(["isfinite_assert_hooks"])
    model, _ = setup(p)
    hooked = sum(1 for m in model.modules() if m._forward_hooks)
    assert hooked > 50
    assert _reads(p, golden) > _reads(bed, golden) + 50


def test_blocking_checkpoint_push_stalls_one_step(bed, golden, clock, monkeypatch) -> None:
    saved: list[int] = []
    p = bed.with_faults(["blocking_checkpoint_push"])
    model, opt = setup(p)
    save = model.save_pretrained
    monkeypatch.setattr(model, "save_pretrained", lambda *a, **k: saved.append(len(times)) or save(*a, **k))
    times, sleeps = [], []
    for _ in range(4):
        t0, mark = clock.perf_counter(), clock.mark()
        p.train_step(model, opt, golden)
        times.append(clock.perf_counter() - t0)
        sleeps.append(clock.since(mark))
    assert saved == [2] and [n for n, s in enumerate(sleeps) if s] == [2]  # the third step saves and uploads
    (upload,) = sleeps[2]
    # At least the floor, and STALL_FACTOR x the longest step before it (the fault's own measure of a
    # step is inside the test's, so within this margin): that one step is blocked many steps long.
    assert upload >= STALL_S and upload >= 0.9 * STALL_FACTOR * max(times[:2])
    assert times[2] > 4 * max(times[1], times[3])
