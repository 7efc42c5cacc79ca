"""Small run logs written by the formats' own writers (or in their exact layout), for the reader tests."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def curve(n: int, start: float = 6.0, end: float = 3.0) -> list[float]:
    return [end + (start - end) * math.exp(-4.0 * i / max(n - 1, 1)) for i in range(n)]


def hf_state(steps: int = 20, eval_every: int = 5, nan_at: int | None = None) -> dict:
    """A `TrainerState.save_to_json` document (sorted keys, indent 2) of a run logging every step."""
    hist = []
    for i, loss in enumerate(curve(steps), start=1):
        v = float("nan") if nan_at is not None and i >= nan_at else loss
        g = float("nan") if nan_at is not None and i >= nan_at else 1.0 + 0.01 * i  # the weights went NaN too
        hist.append({"epoch": i / 10, "grad_norm": g, "learning_rate": 1e-4, "loss": v, "step": i})
        if i % eval_every == 0:
            hist.append({"epoch": i / 10, "eval_loss": loss + 0.1, "eval_runtime": 0.5, "step": i})
    hist.append(
        {
            "epoch": steps / 10,
            "step": steps,
            "total_flos": 1.0,
            "train_loss": 4.2,
            "train_runtime": 10.0,
            "train_samples_per_second": 3.2,
        }
    )
    return {
        "best_metric": None,
        "epoch": steps / 10,
        "eval_steps": eval_every,
        "global_step": steps,
        "log_history": hist,
        "logging_steps": 1,
        "max_steps": steps,
        "num_train_epochs": 2,
        "save_steps": 10,
        "train_batch_size": 4,
    }


def write_state(path: Path, state: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # transformers' TrainerState.save_to_json: json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def hf_run(root: Path, steps: int = 20, save_every: int = 10, root_state: bool = True) -> Path:
    for s in range(save_every, steps + 1, save_every):
        ck = root / f"checkpoint-{s}"
        st = hf_state(s)
        st["log_history"] = [e for e in st["log_history"] if "train_runtime" not in e]
        write_state(ck / "trainer_state.json", st)
        (ck / "model.safetensors").write_bytes(b"\0" * 8)
    if root_state:
        write_state(root / "trainer_state.json", hf_state(steps))
    return root


def tb_run(root: Path, steps: int = 30, tag: str = "train/loss") -> Path:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(root))
    for i, loss in enumerate(curve(steps)):
        w.add_scalar(tag, loss, i)
        w.add_scalar("train/lr", 1e-3, i)
    w.close()
    return root


def lightning_run(root: Path, steps: int = 12) -> Path:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(str(root), name="", version="")
    for i, loss in enumerate(curve(steps)):
        logger.log_metrics({"train_loss_step": loss, "lr-Adam": 1e-3, "epoch": i // 4}, step=i)
        if i % 4 == 3:
            logger.log_metrics({"val_loss": loss + 0.2, "epoch": i // 4}, step=i)
    logger.log_hyperparams({"learning_rate": 1e-3, "vocab_size": 64})
    logger.save()
    return Path(logger.log_dir)


def audiocraft_run(root: Path, epochs: int = 5) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    hist = [
        {
            "train": {"ce": c, "ce_q1": c, "ce_q2": c + 0.1, "ppl": math.exp(c), "lr": 1e-4, "grad_norm": 0.5},
            "valid": {"ce": c + 0.05},
        }
        for c in curve(epochs)
    ]
    (root / "history.json").write_text(json.dumps(hist))
    (root / "checkpoint.th").write_bytes(b"x")
    (root / f"checkpoint_{epochs - 1}.th").write_bytes(b"x")
    return root


def size(path: Path) -> int:
    return os.path.getsize(path)
