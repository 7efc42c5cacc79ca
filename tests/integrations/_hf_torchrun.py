"""An HF `Trainer` job under `torchrun` (2 CPU ranks, gloo) with the callback, on a tiny T5-conditioned
MusicGen (codec frozen, as fine-tuning scripts do), the way a user launches one:

    python -m torch.distributed.run --nproc_per_node 2 _hf_torchrun.py SCENARIO OUT_DIR

SCENARIO: clean, or nan (rank 1's batch at step BAD has every label ignored: its loss is 0/0).
OUT_DIR/rank<R>.json: the rank's findings and what the run did.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import transformers

from _rank_jobs import held_codes
from signalchain.integrations.hf_musicgen.labels import delayed_codes, labels_from_pattern
from signalchain.integrations.hf_trainer import SignalchainCallback
from signalchain.reference.hf.tiny import tiny_model, tiny_tokenizer

STEPS, BAD, B, FRAMES, K, PAD = 8, 4, 2, 10, 4, 64
SCENARIO, OUT = sys.argv[1], Path(sys.argv[2])
RANK = int(os.environ.get("RANK", "0"))


def codes(g: torch.Generator) -> torch.Tensor:
    return held_codes(g, K, FRAMES, PAD)


class Rows(torch.utils.data.Dataset):
    def __init__(self, decoder: torch.nn.Module) -> None:
        tok = tiny_tokenizer()
        enc = tok("a calm piano melody", padding="max_length", max_length=8)
        g = torch.Generator().manual_seed(0)
        ids, mask = torch.tensor(enc["input_ids"]), torch.tensor(enc["attention_mask"])
        pattern = [delayed_codes(decoder, codes(g), PAD) for _ in range(64)]
        self.rows = [{"input_ids": ids, "attention_mask": mask,
                      "labels": labels_from_pattern(p, torch.tensor([FRAMES]), PAD)[0]} for p in pattern]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


class Collate:
    """Stacks a batch; on rank 1, the batch of step BAD loses every label (the fault of scenario nan)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, items: list[dict]) -> dict:
        batch = {k: torch.stack([it[k] for it in items]) for k in items[0]}
        if SCENARIO == "nan" and RANK == 1 and self.calls == BAD:
            batch["labels"] = torch.full_like(batch["labels"], -100)
        self.calls += 1
        return batch


def main() -> None:
    torch.set_num_threads(1)
    model = tiny_model(0)
    model.freeze_audio_encoder()
    args = transformers.TrainingArguments(
        output_dir=str(OUT / "trainer"), report_to=[], use_cpu=True, ddp_backend="gloo", max_steps=STEPS,
        per_device_train_batch_size=B, learning_rate=1e-4, logging_steps=1, save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    cb = SignalchainCallback(out_dir=OUT / "sc", tensorboard=False, watchdog_timeout=60)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows(model.decoder), data_collator=Collate(),
                                   callbacks=[cb])
    error = None
    try:
        trainer.train()
    except Exception as exc:  # written down for the test; the job's exit code says the rest
        error = f"{type(exc).__name__}: {exc}"[:1000]
    digest = hashlib.blake2b(digest_size=16)
    for q in model.parameters():  # DDP keeps replicas bitwise equal: a rank-local skip would break that
        digest.update(q.detach().contiguous().numpy().tobytes())
    with open(OUT / f"rank{RANK}.json", "w") as fh:
        json.dump({"findings": [f.to_dict() for f in cb.findings], "steps": int(trainer.state.global_step),
                   "world": int(args.world_size), "error": error, "weights": digest.hexdigest(),
                   "skipped": cb.session.skipped_steps if cb.session is not None else None}, fh)


if __name__ == "__main__":
    main()
