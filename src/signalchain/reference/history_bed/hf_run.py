"""An HF `Trainer` run writing `trainer_state.json` and `checkpoint-N/` folders, with its faults.

The model is the bed's `BigramLM` (a plain `nn.Module` whose forward returns `{"loss", "logits"}`,
which `Trainer` trains as it trains any model); batches come in a fixed order (an iterable dataset),
so a fault lands on a known step. Clean: AdamW, 5 warm-up steps then cosine, clipping at 1.0,
`logging_steps=1`, evaluation every 10 steps, a checkpoint every 20 (weights only).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ._model import BigramLM, Chains, V

__all__ = ["HF_FAULTS", "train_hf", "HF_STEPS", "SAVE_EVERY", "BAD_STEP"]

HF_FAULTS = ("silent_clip_inf_gain", "empty_labels_nan", "lr_zero", "tiny_train_set", "corrupt_batch_spike")
HF_STEPS, SAVE_EVERY, BATCH, BAD_STEP = 60, 20, 16, 25


class _Rows(torch.utils.data.IterableDataset):
    """Training rows in order; the rows of optimizer step `BAD_STEP` (1-based, as the Trainer counts)
    carry the fault."""

    def __init__(self, fault: str | None, seed: int):
        self.fault, self.seed = fault, seed
        self.chains = Chains(seed)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        pool = self.chains.sample(4, g) if self.fault == "tiny_train_set" else None
        for i in range(HF_STEPS * BATCH * 4):
            x = pool[i % 4] if pool is not None else self.chains.sample(1, g)[0]
            labels = x.clone()
            step = i // BATCH + 1
            if self.fault == "empty_labels_nan" and step == BAD_STEP:
                labels[:] = -100  # a batch whose labels are all padding: the mean over no element
            if self.fault == "corrupt_batch_spike" and step == BAD_STEP:
                labels = torch.randint(0, V, x.shape, generator=g)
            gain = torch.tensor(1.0)
            if self.fault == "silent_clip_inf_gain" and step == BAD_STEP and i % BATCH == 3:
                gain = torch.tensor(1.0) / torch.tensor(0.0)  # a silent clip normalised by its RMS: 1 / 0
            yield {"input_ids": x, "labels": labels, "gain": gain}


def train_hf(out: str | Path, fault: str | None = None, seed: int = 0) -> Path:
    from transformers import Trainer, TrainingArguments

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(seed)
    out = Path(out)
    held = Chains(seed).sample(32, torch.Generator().manual_seed(seed + 7))
    valid = [{"input_ids": x, "labels": x, "gain": torch.tensor(1.0)} for x in held]
    args = TrainingArguments(
        output_dir=str(out), max_steps=HF_STEPS, per_device_train_batch_size=BATCH, per_device_eval_batch_size=32,
        learning_rate=0.0 if fault == "lr_zero" else (3e-2 if fault == "tiny_train_set" else 1e-2),
        lr_scheduler_type="cosine", warmup_steps=5, max_grad_norm=1.0, logging_steps=1, eval_strategy="steps",
        eval_steps=10, save_steps=SAVE_EVERY, save_only_model=True, report_to="none", use_cpu=True, seed=seed,
        disable_tqdm=True, dataloader_num_workers=0, logging_nan_inf_filter=False)
    trainer = Trainer(model=BigramLM(), args=args, train_dataset=_Rows(fault, seed), eval_dataset=valid)
    trainer.train()
    return out
