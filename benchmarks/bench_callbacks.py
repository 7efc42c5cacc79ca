"""What the trainer callbacks cost per step: HF `Trainer` and Lightning, bare vs with signalchain.

    .venv/bin/python benchmarks/bench_callbacks.py [--steps 60] [--reps 3] [--threads 1]

One small MLP classifier, trained by the real trainer for `steps` optimizer steps per run; runs are
interleaved (bare, callback, anomaly, histograms, bare, …) and each run's per-step time is the
median gap between consecutive step ends, its first 5 steps left out. Printed as ratios to `bare`:
  signalchain   SignalchainCallback (Monitor, golden, findings.json, TensorBoard; every=50)
  anomaly       the bare run under torch.autograd.set_detect_anomaly(True), for comparison
  histograms    a W&B `watch(log="all")`-style callback: a histogram of every parameter and gradient
                read back each step (emulated with torch.histc; wandb itself is not needed)
The budget (DESIGN §7) is <= 1.03x for `signalchain`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

WIDTH, DEPTH, BATCH, CLASSES = 256, 4, 64, 10  # --width changes WIDTH


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.body, self.head = nn.Sequential(*layers), nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(self.body(x))
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def data(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"x": torch.randn(WIDTH, generator=g), "labels": torch.randint(0, CLASSES, (), generator=g)}
            for _ in range(n)]


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def histograms(params: Callable[[], Any]) -> None:
    for q in params():
        torch.histc(q.detach().float(), bins=64).tolist()
        if q.grad is not None:
            torch.histc(q.grad.float(), bins=64).tolist()


def per_step(ends: list[float]) -> float:
    gaps = [b - a for a, b in zip(ends[5:], ends[6:])]
    return statistics.median(gaps)


def hf_run(kind: str, steps: int) -> float:
    import transformers

    class Clock(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            if kind == "histograms":
                histograms(model.parameters)

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())

    from signalchain.integrations.hf_trainer import SignalchainCallback

    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        callbacks: list[Any] = [clock] + ([SignalchainCallback()] if kind == "signalchain" else [])
        args = transformers.TrainingArguments(
            output_dir=tmp, report_to=[], use_cpu=True, max_steps=steps, per_device_train_batch_size=BATCH,
            logging_steps=10**6, save_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
        trainer = transformers.Trainer(model=MLP(), args=args, train_dataset=data(BATCH * steps),
                                       data_collator=collate, callbacks=callbacks)
        with torch.autograd.set_detect_anomaly(True) if kind == "anomaly" else contextlib.nullcontext():
            trainer.train()
        return per_step(clock.ends)


def lightning_run(kind: str, steps: int) -> float:
    import lightning.pytorch as L

    from signalchain.integrations.lightning import SignalchainCallback

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = MLP()

        def training_step(self, batch, batch_idx):
            return self.net(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            if kind == "histograms":
                histograms(pl_module.parameters)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        callbacks: list[Any] = [clock] + ([SignalchainCallback(out_dir=tmp)] if kind == "signalchain" else [])
        loader = torch.utils.data.DataLoader(data(BATCH * steps), batch_size=BATCH, collate_fn=collate)
        # Lightning sets anomaly mode itself around fit (off unless asked): it is asked here
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, logger=False,
                            callbacks=callbacks, default_root_dir=tmp, detect_anomaly=kind == "anomaly")
        trainer.fit(Lit(), loader)
        return per_step(clock.ends)


def main() -> None:
    global WIDTH
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--width", type=int, default=WIDTH, help="hidden width (256: a ~7 ms step on one core)")
    args = ap.parse_args()
    WIDTH = args.width
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    kinds = ("bare", "signalchain", "anomaly", "histograms")
    for name, run in (("HF Trainer", hf_run), ("Lightning", lightning_run)):
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.reps):
            for kind in kinds:  # interleaved: the machine's drift hits every kind alike
                times[kind].append(run(kind, args.steps))
        bare = statistics.median(times["bare"])
        print(f"{name}: width {WIDTH}, {args.steps} steps x {args.reps} runs, bare step {bare * 1e3:.2f} ms")
        for kind in kinds[1:]:
            t = statistics.median(times[kind])
            print(f"  {kind:<12} {t * 1e3:8.2f} ms   {t / bare:5.2f}x")


if __name__ == "__main__":
    main()
