"""What watching a real trainer costs: the signalchain callbacks beside the bare trainer.

    .venv/bin/python benchmarks/bench_callbacks.py [--model lm|mlp] [--steps 60] [--rounds 5] [--threads 1]

A tiny transformer language model (`lm`: about 0.5 M parameters, batch 8 x 64 tokens, the shape of a
codec-token LM's step: matmuls dominate) or a small MLP (`mlp`: 4 x 256 wide, batch 64, where the
AdamW update is a third of the step, the worst case for anything that reads every gradient) trained on CPU by
  hf         a real `transformers.Trainer`
  lightning  a real `lightning.Trainer` (devices=1)
with, in the same run, interleaved round by round:
  bare         the trainer alone
  signalchain  + SignalchainCallback (Monitor check every step, update ratio every 20 steps, stall
               watchdog, TensorBoard scalars, golden batch of the first step, findings file)
  anomaly      + torch.autograd.set_detect_anomaly(True) for the whole run (for comparison)
  histograms   + W&B-style histograms: what `wandb.watch(model, log="all", log_freq=1)` computes, a
               64-bin histogram of every parameter and every gradient on every step (emulated with
               torch.histc: wandb itself needs an account or a local server, which this machine lacks)
The time of one step is the gap between consecutive `on_step_end` (HF) / `on_train_batch_end`
(Lightning) calls of a timing callback, so the loader, the forward, the backward, the update and
every other callback are inside it. Median over the steps after the first 5 of every round.
Ratios are to `bare` in the same run (budget: signalchain <= 1.03x).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VOCAB, T, B, D = 512, 64, 8, 128


class TinyLM(torch.nn.Module):
    """Two transformer layers over a 512-token vocabulary; returns {"loss", "logits"} like HF models."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        layer = torch.nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.head(self.body(self.emb(input_ids)))  # [B, T, V]
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        return out


class MLP(torch.nn.Module):
    """4 x 256 GELU layers and a 10-way head; returns {"loss", "logits"}."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(4):
            layers += [torch.nn.Linear(256, 256), torch.nn.GELU()]
        self.body, self.head = torch.nn.Sequential(*layers), torch.nn.Linear(256, 10)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.head(self.body(x))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 256, generator=g), torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


MODELS: dict[str, tuple[Any, Any, int]] = {}  # name -> (model class, dataset class, batch size); filled below


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, VOCAB, (n, T), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.x[i]}


MODELS.update(lm=(TinyLM, Tokens, B), mlp=(MLP, Points, 64))
CHOICE = ["lm"]  # the --model in use


def histograms(model: torch.nn.Module) -> None:
    """wandb.watch(log="all")'s work for one step: a 64-bin histogram of every parameter and gradient."""
    for q in model.parameters():
        for t in (q.detach(), q.grad):
            if t is not None:
                torch.histc(t.float(), bins=64).tolist()
                t.min().item(), t.max().item()


# ---- HF Trainer ---------------------------------------------------------------------------------

def hf_run(variant: str, steps: int, tmp: str) -> list[float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            times.append(time.perf_counter())

    class Histograms(TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            histograms(model)

    callbacks: list[Any] = [Clock()]
    if variant == "signalchain":
        from signalchain.integrations.hf_trainer import SignalchainCallback
        callbacks.append(SignalchainCallback(out_dir=os.path.join(tmp, "sc-hf")))  # defaults: watchdog on
    elif variant == "histograms":
        callbacks.append(Histograms())
    torch.manual_seed(0)
    net, data, batch = MODELS[CHOICE[0]]
    args = TrainingArguments(output_dir=os.path.join(tmp, "hf"), max_steps=steps, per_device_train_batch_size=batch,
                             learning_rate=1e-3, report_to=[], use_cpu=True, save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=net(), args=args, train_dataset=data(steps * batch), callbacks=callbacks)
    with (torch.autograd.set_detect_anomaly(True) if variant == "anomaly" else contextlib.nullcontext()):
        trainer.train()
    return [b - a for a, b in zip(times, times[1:])]


# ---- Lightning ----------------------------------------------------------------------------------

def lightning_run(variant: str, steps: int, tmp: str) -> list[float]:
    import lightning.pytorch as pl

    times: list[float] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = MODELS[CHOICE[0]][0]()

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.model(**batch)["loss"]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Clock(pl.Callback):
        def on_train_batch_end(self, *a: Any, **kw: Any) -> None:
            times.append(time.perf_counter())

    class Histograms(pl.Callback):
        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            histograms(pl_module)

    callbacks: list[Any] = [Clock()]
    if variant == "signalchain":
        from signalchain.integrations.lightning import SignalchainCallback
        callbacks.append(SignalchainCallback(out_dir=os.path.join(tmp, "sc-pl")))
    elif variant == "histograms":
        callbacks.append(Histograms())
    torch.manual_seed(0)
    _, data, batch = MODELS[CHOICE[0]]
    loader = torch.utils.data.DataLoader(data(steps * batch), batch_size=batch)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=os.path.join(tmp, "pl"),
                         detect_anomaly=variant == "anomaly")  # Lightning sets the mode itself around fit
    trainer.fit(Module(), loader)
    return [b - a for a, b in zip(times, times[1:])]


def bench(name: str, run: Callable[[str, int, str], list[float]], steps: int, rounds: int) -> dict[str, float]:
    variants = ["bare", "signalchain", "anomaly", "histograms"]
    per: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        run("bare", 8, tmp)  # warm-up: imports, allocator, thread pools
        for r in range(rounds):
            order = variants if r % 2 == 0 else variants[::-1]  # interleaved: drift hits every variant alike
            for v in order:
                per[v].extend(run(v, steps, tmp)[5:])
    med = {v: statistics.median(xs) for v, xs in per.items()}
    print(f"\n{name}: median step over {rounds} rounds x {steps - 6} steps")
    for v in variants:
        print(f"  {v:12s} {med[v] * 1e3:8.2f} ms   {med[v] / med['bare']:5.2f}x")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", choices=["hf", "lightning"], default=None)
    ap.add_argument("--model", choices=sorted(MODELS), default="lm")
    args = ap.parse_args()
    CHOICE[0] = args.model
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    if args.only in (None, "hf"):
        bench(f"HF Trainer, {args.model}", hf_run, args.steps, args.rounds)
    if args.only in (None, "lightning"):
        bench(f"Lightning Trainer, {args.model}", lightning_run, args.steps, args.rounds)


if __name__ == "__main__":
    main()
