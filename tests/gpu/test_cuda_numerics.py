"""Non-finite values and mixed precision on a GPU: the Monitor's trigger and replay, the locator, and a
float16 GradScaler that skips every step, all on CUDA tensors.

Skipped where no CUDA device exists (CI); run on a lent accelerator with `pytest tests/gpu`.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from signalchain import Monitor, StepOutput, tap
from signalchain.checks.numerics import judge_locate
from signalchain.checks.precision import judge_precision
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.numerics.locate import locate
from signalchain.experiments.numerics.precision import measure_precision

DEV = os.environ.get("SIGNALCHAIN_TEST_DEVICE", "cuda")  # "cpu": a dry run of these tests' logic
pytestmark = pytest.mark.skipif(DEV == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")


class Net(nn.Module):
    def __init__(self, rsqrt: bool = False):
        super().__init__()
        self.rsqrt = rsqrt
        self.enc = nn.Linear(6, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rsqrt:  # an RMS normalisation without eps: an all-zero example gives 0 * inf
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
        x = tap("features", x)
        return self.head(torch.tanh(self.enc(x)))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return tap("loss", nn.functional.cross_entropy(model(x), y))


def data(n: int, zero_row_at: int | None = None):
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        x = torch.randn(16, 6, generator=g)
        if i == zero_row_at:
            x[5] = 0.0
        yield x.to(DEV), torch.randint(0, 4, (16,), generator=g).to(DEV)


def run(model: nn.Module, mon: Monitor, batches) -> list[bool]:
    opt = mon.optimizer
    ok = []
    for batch in batches:
        with mon.step(batch):
            loss = loss_fn(model, batch)
            loss.backward()
            ok.append(mon.check(loss))
            if ok[-1]:
                opt.step()
            opt.zero_grad()
    return ok


def test_monitor_on_cuda_is_silent_then_locates_the_forward_op():
    torch.manual_seed(0)
    clean = Net().to(DEV)
    mon = Monitor(clean, torch.optim.AdamW(clean.parameters(), lr=1e-3), replay=loss_fn, ratio_every=1)
    assert run(clean, mon, data(5)) == [True] * 5 and mon.findings == []
    assert all(r > 0 for r in mon.history["update_ratio"])

    torch.manual_seed(0)
    bad = Net(rsqrt=True).to(DEV)
    mon = Monitor(bad, torch.optim.AdamW(bad.parameters(), lr=1e-3), replay=loss_fn, on_finding=lambda f: None)
    assert run(bad, mon, data(4, zero_row_at=2)) == [True, True, False, True]
    first = next(f for f in mon.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and "rsqrt" in first.evidence["op"]
    assert all(bool(torch.isfinite(q).all()) for q in bad.parameters())


class CudaPipe:
    """A tiny pipeline on CUDA; `log_zero` takes the log of a probability that underflows to 0."""

    name = "cuda-numerics"

    def __init__(self, log_zero: bool = False, scaler: torch.amp.GradScaler | None = None):
        self.log_zero = log_zero
        self.scaler = scaler
        self.amp_dtype = torch.float16 if scaler is not None else None

    def golden_batch(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(16, 6, generator=g).to(DEV), torch.randint(0, 4, (16,), generator=g).to(DEV)

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return Net().to(DEV)

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, model: nn.Module, batch, tap=tap) -> StepOutput:
        x, y = batch
        logits = tap("logits", model(x))
        if self.log_zero:
            p = torch.softmax(logits.float() * 1e4, -1)  # saturated: most probabilities are exactly 0
            loss = tap("loss", -(p.log() * 0.01).mean() + nn.functional.cross_entropy(logits.float(), y))
        else:
            loss = tap("loss", nn.functional.cross_entropy(logits.float(), y))
        return StepOutput(loss=loss, logits=logits, targets=y)


def test_locator_on_cuda_names_the_log_of_zero():
    pipe = CudaPipe(log_zero=True)
    model = pipe.build_model(0)
    report = locate(pipe, model, pipe.golden_batch(0))
    first = report.first()
    assert first is not None and "log" in first.op and first.phase == "forward"
    found = judge_locate(report)
    assert any(f.id == "nonfinite.first" and f.severity.value == "error" for f in found)
    clean = CudaPipe()
    assert judge_locate(locate(clean, clean.build_model(0), clean.golden_batch(0))) == []


def test_a_cuda_float16_scaler_that_skips_every_step_is_found():
    scaler = torch.amp.GradScaler(DEV, init_scale=2.0**40, growth_interval=1)
    rep = measure_precision(Context(CudaPipe(scaler=scaler), seed=0, budget=BUDGETS["economy"]))
    assert rep.dtype == "float16" and rep.has_scaler and any(s.skipped for s in rep.steps)
    assert any(f.id == "amp.steps_skipped" and f.stage == "optimizer" for f in judge_precision(rep))
