"""What the first-step judges cost: a tiny HF MusicGen trained by a real `transformers.Trainer`.

    .venv/bin/python benchmarks/bench_first_step.py [--steps 30] [--rounds 3] [--threads 1]

Variants, interleaved round by round in the same run:
  bare        the trainer alone
  callback    + SignalchainCallback with the first-step judges switched off (golden saved)
  judges      + SignalchainCallback as shipped: the first step judged (parameters, labels against the
              model's delay pattern, decoder inputs against labels, masks) and the golden holding the
              codec's reconstruction of the labels
Printed: the whole run's wall time (first step included: the judges run once, so a per-step median
would hide them) as a ratio to `bare`, the median step, and the time spent in the judges and the
decode themselves, against one median step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def rows(model: Any, n: int) -> list[dict]:
    from signalchain.integrations.hf_musicgen.labels import delayed_codes, labels_from_pattern
    from signalchain.reference.data import generate_clip
    from signalchain.reference.hf.tiny import TinyConfig, resample_clip, tiny_tokenizer

    cfg = TinyConfig()
    tok = tiny_tokenizer(cfg.max_text_len)
    clips = [generate_clip(i, 0, 32000, seconds=1.0) for i in range(n)]
    audio = torch.from_numpy(np.stack([resample_clip(c.audio, 32000, cfg.sample_rate).mean(0, keepdims=True)[:, :16000]
                                       for c in clips]))
    with torch.no_grad():
        codes = model.audio_encoder.encode(audio).audio_codes[0]
    labels = labels_from_pattern(delayed_codes(model.decoder, codes, cfg.codebook_size),
                                 torch.full((n,), codes.shape[-1]), cfg.codebook_size)
    enc = tok([c.caption for c in clips], padding="max_length", max_length=cfg.max_text_len, truncation=True,
              return_tensors="pt")
    return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i], "labels": labels[i]}
            for i in range(n)]


def collate(items: list[dict]) -> dict:
    return {k: torch.stack([x[k] for x in items]) for k in items[0]}


SPENT: dict[str, float] = {}


def timed(cls: Any, name: str) -> None:
    fn = getattr(cls, name)

    def wrapper(self: Any, *a: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(self, *a)
        finally:
            SPENT[name] = SPENT.get(name, 0.0) + time.perf_counter() - start

    setattr(cls, name, wrapper)


def run(variant: str, steps: int, data: list[dict], tmp: str) -> tuple[float, list[float]]:
    import transformers

    from signalchain.integrations._first_step_judges import FirstStepJudging
    from signalchain.integrations.hf_trainer import SignalchainCallback
    from signalchain.reference.hf.tiny import tiny_model

    model = tiny_model(0)
    model.freeze_audio_encoder()
    model.freeze_text_encoder()
    ends: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            ends.append(time.perf_counter())

    callbacks: list[Any] = [Clock()]
    attach = FirstStepJudging._first_attach
    if variant != "bare":
        callbacks.insert(0, SignalchainCallback(tensorboard=False, watchdog_timeout=None))
    if variant == "callback":
        FirstStepJudging._first_attach = lambda self, model, optimizer: None  # type: ignore[method-assign]
    args = transformers.TrainingArguments(output_dir=tmp, report_to=[], use_cpu=True, max_steps=steps,
                                          per_device_train_batch_size=4, learning_rate=1e-3, save_strategy="no",
                                          disable_tqdm=True, dataloader_num_workers=0, logging_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate,
                                   callbacks=callbacks)
    start = time.perf_counter()
    try:
        trainer.train()
    finally:
        FirstStepJudging._first_attach = attach  # type: ignore[method-assign]
    total = time.perf_counter() - start
    return total, [b - a for a, b in zip(ends, ends[1:])][4:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    from signalchain.integrations._first_step_judges import FirstStepJudges, FirstStepJudging
    from signalchain.reference.hf.tiny import tiny_model

    data = rows(tiny_model(0), a.steps * 4)
    timed(FirstStepJudges, "judge")
    timed(FirstStepJudges, "reconstruction")
    del FirstStepJudging
    variants = ("bare", "callback", "judges")
    totals: dict[str, list[float]] = {v: [] for v in variants}
    steps: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(a.rounds + 1):  # the first round warms up (imports, allocator) and is dropped
        for v in variants:
            with tempfile.TemporaryDirectory() as tmp:
                total, gaps = run(v, a.steps, data, tmp)
            totals[v].append(total)
            steps[v] += gaps
    med = {v: statistics.median(totals[v][1:]) for v in variants}
    step = {v: statistics.median(steps[v]) for v in variants}
    print(f"tiny HF MusicGen, HF Trainer, {a.steps} steps x {a.rounds} rounds (first round dropped), "
          f"{a.threads} thread(s)")
    for v in variants:
        print(f"  {v:9s} run {med[v]:7.3f} s  {med[v] / med['bare']:5.2f}x   median step {step[v] * 1e3:7.2f} ms  "
              f"{step[v] / step['bare']:5.2f}x")
    runs = a.rounds + 1
    for name in ("judge", "reconstruction"):
        each = SPENT.get(name, 0.0) / runs
        print(f"  first-step {name:14s} {each * 1e3:7.2f} ms once = {each / step['bare']:5.2f} median steps")


if __name__ == "__main__":
    main()
