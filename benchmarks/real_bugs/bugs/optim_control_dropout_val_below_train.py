"""Control: validation loss below training loss because dropout runs only in training.

stats.stackexchange.com/questions/178371: the validation error of a dropout MLP was below its
training error every epoch; the answers: the training loss is measured with dropout on (a noisier,
weaker network), the validation loss in eval mode with dropout off, and the training figure is an
average over an epoch of a model that kept improving, so validation below training is expected
and not a leak. Reproduced as a Lightning fine-tune of the reference model with dropout 0.3
(`training_step` logs the loss in train mode, `validation_step` runs under Lightning's eval mode),
a `CSVLogger`, and signalchain's Lightning callback; the findings are the callback's and
`signalchain.history` on the `metrics.csv` it wrote.
"""

from __future__ import annotations

import functools
import logging
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

BUG = RealBug(
    name="optim_control_dropout_val_below_train",
    thread="https://stats.stackexchange.com/questions/178371/python-lasagne-tutorial-validation-error-lower-than-training-error",
    library="lightning", idiom="LightningModule around the reference model, dropout 0.3, CSVLogger + callback",
    cls="control", cause="dropout is active in training_step and off in validation (eval mode)",
    fix="none needed", kind="control")

STEPS, EVERY, DROPOUT = 60, 10, 0.3


class Batches(torch.utils.data.Dataset):
    """Pre-drawn batches of the pipeline's loader, one item each (the DataLoader's batch_size=None)."""

    def __init__(self, p: ReferencePipeline, split: str, n: int, seed: int):
        it = p.loader(split, seed)
        self.items = [next(it) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def loaders(p: ReferencePipeline, seed: int, n_train: int = STEPS, n_valid: int = 2):
    keep = lambda b: b  # noqa: E731 - the Batch goes through as the pipeline's step expects it
    train = torch.utils.data.DataLoader(Batches(p, "train", n_train, seed), batch_size=None, collate_fn=keep)
    valid = torch.utils.data.DataLoader(Batches(p, "valid", n_valid, seed), batch_size=None, collate_fn=keep)
    return train, valid


def make_module(p: ReferencePipeline, seed: int, manual: bool = False, step_scheduler: bool = True):
    import lightning.pytorch as pl

    class FineTune(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = p.build_model(seed)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = p.step(self.model, batch).loss
            self.log("train_loss", loss, on_step=True, on_epoch=False, batch_size=len(batch))
            self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)
            if not manual:
                return loss
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
            opt.step()
            if step_scheduler:
                self.lr_schedulers().step()
            return loss

        def validation_step(self, batch, batch_idx):
            loss = p.step(self.model, batch).loss
            self.log("val_loss", loss, on_epoch=True, batch_size=len(batch))

        def configure_optimizers(self):
            opt = torch.optim.AdamW(p.param_groups(self.model), lr=p.cfg.lr, betas=p.cfg.betas)
            warmup = p.cfg.warmup_steps
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return FineTune()


def fit(module, train, valid, seed: int, steps: int, every: int, clip: bool = True) -> tuple[list[dict], Path]:
    """Lightning fit with the signalchain callback and a CSVLogger; returns the findings (callback's and
    history's) and the log folder."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger

    import signalchain as sc
    from signalchain.integrations.lightning import SignalchainCallback

    for name in ("lightning", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="optim_pl_"))
    pl.seed_everything(seed, verbose=False)
    cb = SignalchainCallback(out_dir=None, tensorboard=False)
    logger = CSVLogger(str(root), name="run", version=0)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, val_check_interval=every,
                         check_val_every_n_epoch=None, num_sanity_val_steps=0, logger=logger,
                         gradient_clip_val=1.0 if clip else None, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, log_every_n_steps=1,
                         callbacks=[cb])
    trainer.fit(module, train, valid)
    found = [f.to_dict() for f in cb.findings] + [f.to_dict() for f in sc.history(logger.log_dir).findings]
    return found, Path(logger.log_dir)


def read_metrics(folder: Path) -> dict[str, list[tuple[int, float]]]:
    import csv

    out: dict[str, list[tuple[int, float]]] = {}
    with open(folder / "metrics.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            for k, v in row.items():
                if k not in ("step", "epoch") and v not in ("", None):
                    out.setdefault(k, []).append((int(row["step"]), float(v)))
    return out


@functools.lru_cache(maxsize=4)
def run(seed: int) -> tuple[list[dict], dict]:
    p = ReferencePipeline(RefConfig(dropout=DROPOUT))
    train, valid = loaders(p, seed)
    found, folder = fit(make_module(p, seed), train, valid, seed, STEPS, EVERY)
    return found, read_metrics(folder)


def findings(fixed: bool, seed: int) -> list[dict]:
    return run(seed)[0]


def shows(fixed: bool) -> tuple[bool, str]:
    """The innocent sign: each validation loss below the training loss of the steps before it."""
    _, m = run(0)
    train = m["train_loss"]
    pairs = []
    for step, v in m["val_loss"]:
        before = [t for s, t in train if step - EVERY < s <= step]
        if before:
            pairs.append((step, v, float(np.median(before))))
    below = [v < t for _, v, t in pairs]
    ok = len(pairs) >= 4 and sum(below) >= 0.8 * len(pairs) and all(math.isfinite(v) for _, v, _ in pairs)
    return ok, "val against train (median of the 10 steps before): " + ", ".join(
        f"{v:.3f}/{t:.3f}" for _, v, t in pairs)
