"""A Lightning run writing `metrics.csv` and `hparams.yaml` through `CSVLogger`, with its faults.

Clean: Adam at the configured `learning_rate`, `LearningRateMonitor`, fresh batches each epoch,
validation each epoch on held-out sequences (`val_loss`), `train_loss` every step. The clean twin
with dropout has validation a little below training, as dropout in training only puts it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._model import BigramLM, Chains, V

__all__ = ["LIGHTNING_FAULTS", "train_lightning"]

LIGHTNING_FAULTS = ("random_targets", "tiny_train_set", "valid_easier_subset", "cached_eval", "lr_not_as_configured")
EPOCHS, STEPS_PER_EPOCH, BATCH = 12, 15, 16


def _module(fault: str | None, dropout: float, lr: float):
    import lightning.pytorch as pl

    class Bed(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"learning_rate": lr, "vocab_size": V, "dropout": dropout})
            self.model = BigramLM(dropout=dropout)
            self._cached: torch.Tensor | None = None

        def training_step(self, batch, _):
            x = batch[0]
            labels = torch.randint(0, V, x.shape) if fault == "random_targets" else x  # labels of another row order
            loss = self.model(x, labels)["loss"]
            self.log("train_loss", loss, on_step=True, on_epoch=False)
            return loss

        def validation_step(self, batch, _):
            loss = self.model(batch[0])["loss"]
            if fault == "cached_eval":  # the first result kept "to save time"
                self._cached = loss.detach() if self._cached is None else self._cached
                loss = self._cached
            self.log("val_loss", loss, on_epoch=True)

        def configure_optimizers(self):
            used = 10 * lr if fault == "lr_not_as_configured" else lr  # a rate hard-coded beside the config
            return torch.optim.Adam(self.parameters(), lr=used)

    return Bed()


def _data(fault: str | None, seed: int):
    chains = Chains(seed)
    g = torch.Generator().manual_seed(seed)
    n = 4 if fault == "tiny_train_set" else STEPS_PER_EPOCH * BATCH  # 4 clips: 124 transitions a codebook
    train = chains.sample(n, g)
    if fault == "valid_easier_subset":  # validation kept only the most typical clips (a filter run on it alone)
        valid = chains.typical(4 * BATCH, torch.Generator().manual_seed(seed + 7))
    else:
        valid = chains.sample(4 * BATCH, torch.Generator().manual_seed(seed + 7))
    ds = torch.utils.data.TensorDataset
    return (torch.utils.data.DataLoader(ds(train), batch_size=min(BATCH, n), shuffle=True,
                                        generator=torch.Generator().manual_seed(seed)),
            torch.utils.data.DataLoader(ds(valid), batch_size=4 * BATCH))


def train_lightning(out: str | Path, fault: str | None = None, seed: int = 0, dropout: float = 0.0) -> Path:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger

    pl.seed_everything(seed, verbose=False)
    out = Path(out)
    lr = 1e-2
    train, valid = _data(fault, seed)
    epochs = 60 if fault == "tiny_train_set" else EPOCHS
    logger = CSVLogger(str(out.parent), name=out.name, version="")
    trainer = pl.Trainer(max_epochs=epochs, logger=logger, callbacks=[LearningRateMonitor("step")],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=1, accelerator="cpu", devices=1, num_sanity_val_steps=0)
    trainer.fit(_module(fault, dropout, lr), train, valid)
    return Path(logger.log_dir)
