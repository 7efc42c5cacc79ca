"""(b) A plain `Trainer` fine-tuning the whole decoder and text encoder, labels with -100 wherever the
delay pattern is empty and in the time padding (HF's "labels set to -100 are ignored"), the codec
frozen (`freeze_audio_encoder`), AdamW with a cosine schedule after a warm-up, clipping at 1.0, and the
collator dropping 25 % of the captions for classifier-free guidance (an empty caption: T5's `</s>`
alone), as AudioCraft does and HF users copy. 24 steps over 3 epochs of 8 clips: the update ratio is
measured again at step 20, and the loss history is long enough for the instability judges.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Trainer, full decoder + T5, -100 in the corners and padding, cosine, 25 % caption dropout, 24 steps"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, CLIPS, DROP = 24, 2, 8, 0.25


class DroppingCollate(_bed.Collate):
    """Replaces a caption by the empty one with probability `DROP` (its own generator: reproducible)."""

    def __init__(self, seed: int) -> None:
        super().__init__(-100)
        self.g = torch.Generator().manual_seed(seed)
        self.empty = self.tok("")["input_ids"]

    def __call__(self, items: list[dict]) -> dict:
        drop = torch.rand(len(items), generator=self.g) < DROP
        return super().__call__([{**it, "input_ids": self.empty} if d else it for it, d in zip(items, drop)])


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_ignored) -> _bed.Run:
    net = _bed.model(seed)
    data = _bed.Rows(net, CLIPS, seed, labels)
    net.freeze_audio_encoder()
    before = _bed.trainable_copy(net)
    args = transformers.TrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=lr, lr_scheduler_type="cosine", warmup_steps=2, weight_decay=0.01, max_grad_norm=1.0,
        logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed, dataloader_num_workers=0,
        remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data, data_collator=DroppingCollate(seed),
                                   callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("trainer_ignore_index", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
