"""(f) A LightningModule holding the HF MusicGen, written like the Lightning fine-tunes found in public
repositories: `training_step` returns `self.model(**batch).loss` and logs it, `configure_optimizers`
gives AdamW + a linear warm-up, the Trainer runs `precision="bf16-mixed"`, accumulates 2 batches and
clips at 1.0, with its default logger. The collator pads the labels' time axis with the model's pad id
(HF masks it as it masks -100); dreambooth-style labels. The callback as the README adds it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from .. import _bed

IDIOM = "Lightning: LightningModule around HF MusicGen, bf16-mixed, accumulate 2, pad-id label padding"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, ACCUMULATE = 3, 2, 2


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_truncated) -> _bed.Run:
    import lightning.pytorch as pl

    from signalchain.integrations.lightning import SignalchainCallback

    class MusicgenFineTune(pl.LightningModule):
        def __init__(self, net) -> None:
            super().__init__()
            self.model = net

        def training_step(self, batch, batch_idx):
            loss = self.model(**batch).loss
            self.log("train/loss", loss, prog_bar=False)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=lr)
            sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=1, num_training_steps=STEPS)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    pl.seed_everything(seed, verbose=False)
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH * ACCUMULATE, seed, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    before = _bed.trainable_copy(net)
    module = MusicgenFineTune(net)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, collate_fn=_bed.Collate(_bed.PAD))
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, accumulate_grad_batches=ACCUMULATE,
                         gradient_clip_val=1.0, precision="bf16-mixed", default_root_dir=str(out),
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         log_every_n_steps=1, callbacks=[cb])
    trainer.fit(module, loader)
    losses = [float(v) for k, v in trainer.logged_metrics.items() if k == "train/loss"]
    return _bed.Run("lightning_module", seed, _bed.findings_of(cb.findings), int(trainer.global_step), losses,
                    _bed.trainable_moved(net, before))
