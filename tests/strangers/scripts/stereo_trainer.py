"""(j) A stereo MusicGen (`audio_channels=2`: the decoder predicts 2 × 4 interleaved codebooks, left and
right of one delay sharing it) fine-tuned through `Trainer`: each channel encoded by the mono codec
apart and interleaved L, R, L, …, dreambooth-style labels over all 8 codebooks, -100 padding.
"""

from __future__ import annotations

from pathlib import Path

import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed

IDIOM = "Trainer, stereo checkpoint (8 interleaved codebooks), dreambooth-style labels"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH = 4, 2


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_truncated) -> _bed.Run:
    net = _bed.model(seed, _bed.STEREO)
    data = _bed.Rows(net, STEPS * BATCH, seed, labels, _bed.STEREO)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    before = _bed.trainable_copy(net)
    args = transformers.TrainingArguments(
        output_dir=str(out), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=lr, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=seed,
        dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                                   callbacks=[cb])
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("stereo_trainer", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
