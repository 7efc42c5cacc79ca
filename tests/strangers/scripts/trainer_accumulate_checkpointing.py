"""(c) `Trainer` with gradient accumulation (2 micro-batches an update) and gradient checkpointing
(`gradient_checkpointing=True`: HF MusicGen's decoder supports it, `supports_gradient_checkpointing`),
dreambooth-style labels (pad id in the corners, -100 padding), the codec and text encoder frozen and
`enable_input_require_grads()` so that checkpointed blocks see an input that requires grad.
"""

from __future__ import annotations

from pathlib import Path

import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Trainer, gradient_accumulation_steps=2 + gradient_checkpointing, frozen encoders"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, ACCUMULATE = 3, 2, 2


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_truncated) -> _bed.Run:
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH * ACCUMULATE, seed, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    net.enable_input_require_grads()
    before = _bed.trainable_copy(net)
    args = transformers.TrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE, gradient_checkpointing=True, learning_rate=lr,
        logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed, dataloader_num_workers=0,
        remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                                   callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert net.decoder.model.decoder.gradient_checkpointing, "the decoder did not checkpoint"
    return _bed.Run("trainer_accumulate_checkpointing", seed, _bed.findings_of(cb.findings),
                    trainer.state.global_step, losses, _bed.trainable_moved(net, before))
