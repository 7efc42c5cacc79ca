"""(l) musicgen-dreamboothing's README recipe in full, as its users run it on a small card: the
Seq2SeqTrainer subclass with LoRA, the text encoder *not* frozen (so LoRA also targets T5's q, k, v,
o, wi, wo), gradient accumulation, gradient checkpointing and half precision (bf16: the CPU has no
fp16 autocast in Trainer), a warm-up, clipping at 1.0, weight decay.
"""

from __future__ import annotations

from pathlib import Path

import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed
from .seq2seq_dreambooth import MusicgenTrainer, lora_targets

IDIOM = "Seq2SeqTrainer + LoRA on decoder and T5, accumulation 2, gradient checkpointing, bf16, warm-up"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, ACCUMULATE = 3, 2, 2


def main(seed: int, out: Path, *, lr: float = 2e-4, labels=_bed.labels_truncated) -> _bed.Run:
    import peft

    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH * ACCUMULATE, seed, labels)
    net.freeze_audio_encoder()  # the text encoder stays trainable: its LoRA pairs learn
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, bias="none",
                             target_modules=[*lora_targets(net), "k", "v", "q", "o", "wi", "wo"])
    net.enable_input_require_grads()
    net = peft.get_peft_model(net, config)
    before = _bed.trainable_copy(net)
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, bf16=True, max_steps=STEPS,
        per_device_train_batch_size=BATCH, gradient_accumulation_steps=ACCUMULATE, gradient_checkpointing=True,
        learning_rate=lr, warmup_steps=1, weight_decay=0.01, max_grad_norm=1.0, logging_steps=1,
        save_strategy="no", disable_tqdm=True, seed=seed, dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = MusicgenTrainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                              callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("dreambooth_recipe", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
