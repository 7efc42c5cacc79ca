"""The HF bed's performance faults: wall-clock time of the loader and of the steps, and the host
reads (value reads of tensors) a forward makes, counted at the aten level."""

from __future__ import annotations

import itertools
import time

import torch
from hf_bed_support import check_registered, setup
from torch.utils._python_dispatch import TorchDispatchMode

torch.set_num_threads(1)

NAMES = {"audio_decoded_on_every_access", "isfinite_assert_hooks", "blocking_checkpoint_push"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("performance", NAMES, "Slow training and stalled pipelines")


def _loader_seconds(p, batches: int = 3) -> float:
    it = p.loader("train")
    next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - t0) / batches


def test_audio_decoded_on_every_access_makes_the_loader_slower_than_the_step(bed, golden) -> None:
    p = bed.with_faults(["audio_decoded_on_every_access"])
    wait = _loader_seconds(p)
    assert wait >= 8 * 0.015  # 4 examples read twice, each read waits for storage
    assert _loader_seconds(bed) < 0.01
    model, opt = setup(bed)
    bed.train_step(model, opt, golden)
    t0 = time.perf_counter()
    bed.train_step(model, opt, golden)
    assert wait > 0.5 * (time.perf_counter() - t0)  # comparable to (or longer than) the compute


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


def test_blocking_checkpoint_push_stalls_one_step(bed, golden) -> None:
    p = bed.with_faults(["blocking_checkpoint_push"])
    model, opt = setup(p)
    times = []
    for _ in range(4):
        t0 = time.perf_counter()
        p.train_step(model, opt, golden)
        times.append(time.perf_counter() - t0)
    assert times[2] > 0.8 and times[2] > 4 * max(times[1], times[3])
    assert list(itertools.compress(range(4), [t > 0.8 for t in times])) == [2]
