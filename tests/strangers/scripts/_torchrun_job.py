"""The job `torchrun_seq2seq` launches: musicgen-dreamboothing's Seq2SeqTrainer + LoRA run on 2 CPU ranks
(gloo), as a user starts it:

    python -m torch.distributed.run --nproc_per_node 2 _torchrun_job.py SEED OUT_DIR [LR]

OUT_DIR/rank<R>.json: the rank's findings and what its training did.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import transformers

from signalchain.integrations.hf_trainer import SignalchainCallback
from strangers import _bed
from strangers.scripts.seq2seq_dreambooth import BATCH, STEPS, MusicgenTrainer, build


def main() -> None:
    seed, out = int(sys.argv[1]), Path(sys.argv[2])
    lr = float(sys.argv[3]) if len(sys.argv) > 3 else 2e-4
    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(1)
    net, data = build(seed)
    before = _bed.trainable_copy(net)
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(out / "trainer"), report_to=[], use_cpu=True, ddp_backend="gloo", max_steps=STEPS,
        per_device_train_batch_size=BATCH // 2 or 1, learning_rate=lr, logging_steps=1, save_strategy="no",
        disable_tqdm=True, seed=seed, dataloader_num_workers=0, remove_unused_columns=False)
    cb = SignalchainCallback(watchdog_timeout=300)
    trainer = MusicgenTrainer(model=net, args=args, train_dataset=data, data_collator=_bed.Collate(-100),
                              callbacks=[cb])
    error = None
    try:
        trainer.train()
    except Exception as exc:  # written down for the bed; the job's exit code says the rest
        error = f"{type(exc).__name__}: {exc}"[:1000]
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    with open(out / f"rank{rank}.json", "w") as fh:
        json.dump({"findings": _bed.findings_of(cb.findings), "steps": int(trainer.state.global_step),
                   "world": int(args.world_size), "error": error, "losses": losses,
                   "moved": _bed.trainable_moved(net, before)}, fh)


if __name__ == "__main__":
    main()
