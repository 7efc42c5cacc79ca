"""The same contracts on a GPU: taps of CUDA tensors, golden capture/compare, graph-break watch.

Skipped where no CUDA device exists (CI); run on a lent accelerator with `pytest tests/gpu`.
"""

import numpy as np
import pytest
import torch
from torch import nn

from signalchain import StepOutput, compare_traces, load_golden, record, save_golden, tap
from signalchain.experiments.capture import run_golden
from signalchain.golden import collect_provenance

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEV = "cuda"


def test_taps_of_cuda_tensors_are_summarised_and_copied_to_the_host():
    x = torch.randn(4, 2, 8000, device=DEV) * 0.1
    with record(values=True) as t:
        tap("audio.original", x, sample_rate=8000)
        tap("embedding", torch.randn(2, 3, 4, device=DEV, dtype=torch.bfloat16))
        tap("mask.loss", torch.rand(2, 5, device=DEV) > 0.5)
        tap("tokens", torch.randint(0, 16, (2, 4, 10), device=DEV))
        tap("loss", torch.tensor(3.5, device=DEV, requires_grad=True) * 1.0)
    assert t["audio.original"].device.startswith("cuda")
    assert isinstance(t.value("audio.original"), np.ndarray)
    np.testing.assert_allclose(t.value("audio.original"), x.cpu().numpy())
    cpu = x.cpu().numpy()
    assert t["audio.original"].summary["mean"] == pytest.approx(float(cpu.astype(np.float64).mean()))
    assert t["embedding"].dtype == "bfloat16" and t.value("embedding").dtype == np.float32
    assert t.value("mask.loss").dtype == np.bool_ and t.value("tokens").dtype == np.int64
    assert t.value("loss") == pytest.approx(3.5) and t["loss"].meta["requires_grad"] is True


class CudaToy:
    name = "cuda-toy"
    sample_rate = 8000

    def golden_batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        return {"audio": torch.randn(4, 1, 4000, generator=g) * 0.2, "captions": [f"c{i}" for i in range(4)]}

    def build_model(self, seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Embedding(16, 32), nn.Linear(32, 16)).to(DEV)

    def build_optimizer(self, model):
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, model, batch, tap=tap):
        audio = tap("audio.original", batch["audio"].to(DEV), sample_rate=8000)
        tap("caption", batch["captions"])
        frames = audio.reshape(4, 1, -1, 100).abs().amax(-1)
        tokens = tap("tokens", (frames * 40).long().clamp(0, 15), cardinality=16)
        logits = tap("logits", model(tokens[..., :-1]))
        loss = tap("loss", nn.functional.cross_entropy(logits.flatten(0, 2), tokens[..., 1:].flatten()))
        return StepOutput(loss=loss, logits=logits, targets=tokens[..., 1:])


def test_golden_capture_on_cuda_round_trips_and_compares(tmp_path):
    run = run_golden(CudaToy(), seed=0)
    assert run.trace["logits"].device.startswith("cuda")
    path = save_golden(tmp_path / "g", run.trace, collect_provenance(CudaToy(), seed=0, device=DEV))
    again = run_golden(CudaToy(), seed=0)
    assert compare_traces(load_golden(path).trace, again.trace).identical


def test_graph_break_watch_on_cuda():
    from signalchain.checks.optimisation.gradients import judge_gradients
    from signalchain.experiments.context import Context
    from signalchain.experiments.optimisation.gradients import measure_gradients

    class Detached(CudaToy):
        def step(self, model, batch, tap=tap):
            out = super().step(model, batch, lambda s, v, **m: v)
            logits = out.logits.detach()  # the bug
            tap("logits", logits)
            loss = nn.functional.cross_entropy(logits.flatten(0, 2), out.targets.flatten())
            tap("loss", loss)
            return StepOutput(loss=loss, logits=logits)

    found = judge_gradients(measure_gradients(Context(Detached())))
    assert any(f.id == "grad.detached" and f.stage == "logits" for f in found)
    assert not judge_gradients(measure_gradients(Context(CudaToy())))
