"""(a) A `Seq2SeqTrainer` subclass with LoRA, written like musicgen-dreamboothing's script: labels in the
decoder's own delay pattern cut to the input's length, the pattern's corners holding the pad id
(= the codebook size), the time padding -100; the codec and the text encoder frozen; LoRA (peft) on
the attention and feed-forward projections, every LM head, every codebook embedding and the
encoder-to-decoder projection, after `enable_input_require_grads()`; the callback as the README adds it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Seq2SeqTrainer + LoRA (peft), labels with the pad id in the pattern's corners, -100 padding"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH = 4, 2


class MusicgenTrainer(transformers.Seq2SeqTrainer):
    """The public script's subclass: generated audio is padded along its time axis, not a token axis."""

    def _pad_tensors_to_max_len(self, tensor, max_length):
        padded = torch.zeros((tensor.shape[0], max_length, *tensor.shape[2:]), dtype=tensor.dtype,
                             device=tensor.device)
        n = min(max_length, tensor.shape[1])
        padded[:, :n] = tensor[:, :n]
        return padded


def lora_targets(net) -> list[str]:
    heads = len(net.decoder.lm_heads)
    return (["enc_to_dec_proj", "k_proj", "v_proj", "q_proj", "out_proj", "fc1", "fc2"]
            + [f"lm_heads.{i}" for i in range(heads)] + [f"embed_tokens.{i}" for i in range(heads)])


def build(seed: int, labels=_bed.labels_truncated):
    import peft

    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH, seed, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=lora_targets(net), lora_dropout=0.05, bias="none")
    net.enable_input_require_grads()
    return peft.get_peft_model(net, config), data


def main(seed: int, out: Path, *, lr: float = 2e-4, labels=_bed.labels_truncated) -> _bed.Run:
    net, data = build(seed, labels)
    before = _bed.trainable_copy(net)
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=lr, warmup_steps=1, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed,
        dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = MusicgenTrainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                              callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("seq2seq_dreambooth", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
