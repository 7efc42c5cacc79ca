"""The performance family's measurements on a GPU: only reads of device values count as syncs (the
optimizer's host-side step counters do not), each once, and an update's time includes the kernels
it queued. Skipped where no CUDA device exists (CI); run on a lent accelerator with `pytest tests/gpu`.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from signalchain import StepOutput
from signalchain.checks.performance import judge_performance
from signalchain.experiments.context import Budget, Context
from signalchain.experiments.performance import count_host_reads, measure_performance, time_updates

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEV = "cuda"
VOCAB = 64


class CudaLoop:
    """A next-token model on the GPU; `reads`, `lists`, `masks` add host reads to its step."""

    name = "cuda-loop"

    def __init__(self, reads=0, lists=0, masks=0, gpu_sleep_cycles=0):
        self.reads, self.lists, self.masks, self.gpu_sleep_cycles = reads, lists, masks, gpu_sleep_cycles

    def golden_batch(self, seed):
        return torch.randint(0, VOCAB, (8, 33), generator=torch.Generator().manual_seed(seed))

    def loader(self, split="train"):
        g = torch.Generator().manual_seed(1)
        while True:
            yield torch.randint(0, VOCAB, (8, 33), generator=g)

    def build_model(self, seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Embedding(VOCAB, 128), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, VOCAB)).to(DEV)

    def build_optimizer(self, model):
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, model, batch, tap=lambda s, v, **m: v):
        x = batch.to(DEV, non_blocking=True)  # host to device: no wait for a value
        logits = model(x[:, :-1])  # [B, T, V]
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        for i in range(self.reads):
            logits[i % 8, 0, 0].item()
        for i in range(self.lists):
            logits[i % 8, 0, :4].tolist()
        for _ in range(self.masks):
            logits[logits > 0].sum()
        if self.gpu_sleep_cycles:
            torch.cuda._sleep(self.gpu_sleep_cycles)  # a long kernel, queued, never waited for here
        return StepOutput(loss=tap("loss", loss))


def ctx_of(p):
    return Context(p, seed=0, budget=Budget(perf_steps=6, perf_sync_steps=2))


def test_only_device_reads_count_each_once():
    base, _, _, _ = count_host_reads(ctx_of(CudaLoop()), 2)
    assert max(base) <= 1  # AdamW's step counters live on the host: reading them is free
    reads, calls, ops, sites = count_host_reads(ctx_of(CudaLoop(reads=5, lists=7, masks=3)), 2)
    assert [r - b for r, b in zip(reads, base)] == [15, 15]
    assert calls == [5, 5]  # the Sequential and its four children
    assert ops.get("_local_scalar_dense", 0) >= 10 and ops.get("to_cpu", 0) >= 14 and ops.get("index", 0) >= 6
    assert any("test_performance.py" in s for s in sites)


def test_an_update_is_timed_with_its_queued_kernels():
    rep = time_updates(ctx_of(CudaLoop(gpu_sleep_cycles=200_000_000)), 5)  # ≥ 50 ms of GPU time at ≤ 4 GHz
    assert rep.device.startswith("cuda") and len(rep.waits) == len(rep.computes) == 5
    assert sorted(rep.computes)[2] >= 0.04


def test_sync_bound_on_the_gpu():
    rep = measure_performance(ctx_of(CudaLoop(reads=40)))
    (f,) = [f for f in judge_performance(rep) if f.id == "perf.sync_bound"]
    assert f.stage == "runtime" and f.evidence["device"].startswith("cuda") and f.evidence["syncs_per_update"] >= 40
    clean = measure_performance(ctx_of(CudaLoop()))
    assert not [f for f in judge_performance(clean) if f.id == "perf.sync_bound"]
