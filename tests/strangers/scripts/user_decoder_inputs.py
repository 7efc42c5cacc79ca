"""(i) `Trainer` where the user's collator builds the decoder inputs itself, as HF does inside the model:
`shift_tokens_right(labels, pad, decoder_start)` from transformers' MusicGen module, flattened to
`[B*K, T]` (the layout `decoder_input_ids` takes), beside the labels (pad id in the corners, -100
padding) and a `decoder_attention_mask` that is 0 over each example's time padding; the captions are
padded to the tokenizer's `max_length` rather than the longest.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Trainer, collator-made decoder_input_ids (shift_tokens_right) + decoder_attention_mask"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH = 4, 2


class ShiftingCollate(_bed.Collate):
    def __init__(self, decoder_config, shift: bool = True) -> None:
        super().__init__(-100)
        self.pad, self.start, self.shift = decoder_config.pad_token_id, decoder_config.decoder_start_token_id, shift

    def __call__(self, items: list[dict]) -> dict:
        from transformers.models.musicgen.modeling_musicgen import shift_tokens_right

        batch = super().__call__(items)
        captions = self.tok.pad([{"input_ids": it["input_ids"]} for it in items], padding="max_length",
                                max_length=_bed.CFG.max_text_len, return_tensors="pt")
        batch.update(captions)
        labels = batch["labels"]  # [B, T, K]
        b, t, k = labels.shape
        inputs = shift_tokens_right(labels, self.pad, self.start) if self.shift else \
            labels.transpose(1, 2).masked_fill(labels.transpose(1, 2) == -100, self.pad)  # the fault: no shift
        lengths = torch.tensor([it["labels"].shape[-1] for it in items])
        batch["decoder_input_ids"] = inputs.reshape(b * k, t)
        batch["decoder_attention_mask"] = (torch.arange(t)[None] < lengths[:, None]).long()
        return batch


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_truncated, shift: bool = True) -> _bed.Run:
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH, seed, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    before = _bed.trainable_copy(net)
    args = transformers.TrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=lr, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed,
        dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data,
                                   data_collator=ShiftingCollate(net.decoder.config, shift), callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("user_decoder_inputs", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
