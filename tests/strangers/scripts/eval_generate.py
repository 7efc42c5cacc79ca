"""(k) `Seq2SeqTrainer` with evaluation during training (`eval_strategy="steps"`), `predict_with_generate`
(the model generates audio for every eval batch and `compute_metrics` scores it, here by its loudness in
place of CLAP), the dreambooth subclass padding generated audio, and the callback's TensorBoard audio
sample (`sample_every`, `sample_fn` generating from a fixed prompt at the codec's rate) beside the
trainer's own TensorBoard logs (`report_to=["tensorboard"]`), as the README describes it. Labels with
the pad id in the corners and -100 padding; encoders frozen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback

from .. import _bed
from .seq2seq_dreambooth import MusicgenTrainer

IDIOM = "Seq2SeqTrainer, eval every 2 steps with predict_with_generate + compute_metrics, TensorBoard samples"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, NEW_TOKENS = 4, 2, 8


def loudness(pred) -> dict:
    audio = np.asarray(pred.predictions, dtype=np.float64)
    return {"rms": float(np.sqrt(np.mean(audio ** 2)))}


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_truncated) -> _bed.Run:
    net = _bed.model(seed)
    train = _bed.Rows(net, STEPS * BATCH, seed, labels)
    held_out = _bed.Rows(net, BATCH, seed + 100, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    before = _bed.trainable_copy(net)
    prompt = _bed.tokenizer()(["a calm piano melody"], return_tensors="pt")
    rate = net.config.audio_encoder.sampling_rate

    def sample(model):
        return model.generate(**prompt.to(model.device), max_new_tokens=NEW_TOKENS)[0, 0], rate

    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(out), report_to=["tensorboard"], use_cpu=True, max_steps=STEPS,
        per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH, learning_rate=lr, logging_steps=1,
        eval_strategy="steps", eval_steps=2,
        predict_with_generate=True, generation_max_length=NEW_TOKENS + 1, save_strategy="no", disable_tqdm=True,
        seed=seed, dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300, sample_every=2, sample_fn=sample)
    trainer = MusicgenTrainer(model=net, args=args, train_dataset=train, eval_dataset=held_out,
                              data_collator=_bed.Collate(-100), compute_metrics=loudness, callbacks=[cb])
    with _bed.environ(TENSORBOARD_LOGGING_DIR=str(out / "runs")):  # as the user's shell would set it
        trainer.train()
    evals = [e for e in trainer.state.log_history if "eval_rms" in e]
    assert len(evals) == STEPS // 2 and all(np.isfinite(e["eval_rms"]) for e in evals), evals
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return _bed.Run("eval_generate", seed, _bed.findings_of(cb.findings), trainer.state.global_step, losses,
                    _bed.trainable_moved(net, before))
