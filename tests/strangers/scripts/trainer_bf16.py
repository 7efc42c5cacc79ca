"""(d) `Trainer(bf16=True)` on the CPU (autocast to bfloat16), parler-style labels (the full pattern,
every empty slot the pad id, -100 padding), the codec frozen, the decoder and text encoder trained.
"""

from __future__ import annotations

from pathlib import Path

import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Trainer(bf16=True) on CPU autocast, full-length pattern labels (pad id as BOS/EOS)"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH = 4, 2


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_full) -> _bed.Run:
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH, seed, labels)
    net.freeze_audio_encoder()
    before = _bed.trainable_copy(net)
    args = transformers.TrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, bf16=True, max_steps=STEPS,
        per_device_train_batch_size=BATCH, learning_rate=lr, logging_steps=1, save_strategy="no",
        disable_tqdm=True, seed=seed, dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                                   callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("trainer_bf16", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
