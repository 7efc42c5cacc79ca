"""HF `Trainer` output folders: `trainer_state.json` (its `log_history`) and the `checkpoint-N/` folders.

A Trainer writes `trainer_state.json` into each `checkpoint-N/` it saves (the log up to step N) and
into the output folder only when the script calls `save_state()`; a run that died has only the
checkpoints' copies. The reader takes the copy whose log reaches furthest (the root's on a tie).

`log_history` holds one dict per `log()` call: training entries (`loss`, `grad_norm`,
`learning_rate`, `epoch`, `step`), evaluation entries (`eval_*`) on the same steps as separate dicts,
and a last summary (`train_runtime`, `train_loss` = the mean over the run, ...): the summary goes to
`config["train_summary"]`, never into a series (its `train_loss` is not a point of the curve).
`training_args.bin` is a pickle and is never read. The configuration comes from JSON only: a
`training_args.json` beside the state (what a script writes with `TrainingArguments.to_json_string()`;
the Trainer itself writes none) for `learning_rate`, the schedule and the batch, and the model's
`config.json` (root or latest checkpoint) for `vocab_size` and `num_codebooks` (MusicGen nests them
under `decoder`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..records.history import Checkpoint, ReadNote, RunHistory
from ._jsonfile import read_json
from ._points import Points, number

__all__ = ["is_hf_trainer", "read_hf_trainer", "CHECKPOINT_DIR", "WEIGHTS"]

CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
#: Files whose presence makes a checkpoint folder loadable (full model, sharded, or a PEFT adapter).
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
_CONFIG_KEYS = (
    "logging_steps",
    "eval_steps",
    "save_steps",
    "max_steps",
    "num_train_epochs",
    "train_batch_size",
    "global_step",
)
_SUMMARY = "train_runtime"
_ARGS_KEYS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "warmup_ratio",
    "max_grad_norm",
    "weight_decay",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "fp16",
    "bf16",
    "seed",
)
_MODEL_KEYS = ("vocab_size", "num_codebooks")


def _checkpoint_dirs(root: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        m = CHECKPOINT_DIR.match(name)
        if m and os.path.isdir(os.path.join(root, name)):
            out.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(out)


def is_hf_trainer(path: str) -> bool:
    if os.path.isfile(path):
        return os.path.basename(path) == "trainer_state.json"
    return os.path.isfile(os.path.join(path, "trainer_state.json")) or any(
        os.path.isfile(os.path.join(d, "trainer_state.json")) for _, d in _checkpoint_dirs(path)
    )


def _last_step(state: Any) -> int:
    hist = state.get("log_history") if isinstance(state, dict) else None
    steps = [e.get("step") for e in hist or [] if isinstance(e, dict) and isinstance(e.get("step"), int)]
    return max(steps, default=-1)


def _entries(state: dict[str, Any], path: str, points: Points, run: RunHistory) -> None:
    hist = state.get("log_history")
    if not isinstance(hist, list):
        run.notes.append(ReadNote(path, "has no `log_history` list"))
        return
    skipped = 0
    last_epoch_step = None
    for entry in hist:
        if not isinstance(entry, dict):
            skipped += 1
            continue
        if _SUMMARY in entry:  # the end-of-training summary, not a point of any curve
            run.config["train_summary"] = {k: v for k, v in entry.items() if number(v) is not None}
            continue
        step = entry.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, float)):
            skipped += 1
            continue
        epoch = number(entry.get("epoch"))
        for key, raw in entry.items():
            if key in ("step", "epoch"):
                continue
            value = number(raw)
            if value is None:
                continue
            points.add(key, int(step), value, None, epoch, path)
        if epoch is not None and int(step) != last_epoch_step:  # an eval entry repeats its step's epoch
            points.add("epoch", int(step), epoch, None, epoch, path)
            last_epoch_step = int(step)
    if skipped:
        run.notes.append(ReadNote(path, f"{skipped} entries of `log_history` have no numeric `step`: skipped"))


def read_hf_trainer(path: str) -> RunHistory:
    root = os.path.dirname(path) if os.path.isfile(path) else path
    run = RunHistory(root=path, format="hf-trainer")
    candidates = []
    if os.path.isfile(os.path.join(root, "trainer_state.json")):
        candidates.append(os.path.join(root, "trainer_state.json"))
    ckpts = _checkpoint_dirs(root)
    for step, d in ckpts:
        files = sorted(os.listdir(d))
        run.checkpoints.append(Checkpoint(step, d, complete=any(w in files for w in WEIGHTS), files=files))
        if os.path.isfile(os.path.join(d, "trainer_state.json")):
            candidates.append(os.path.join(d, "trainer_state.json"))
    best: tuple[int, str, Any, list[ReadNote]] | None = None  # (last step, file, state, its notes)
    for cand in candidates:
        notes: list[ReadNote] = []
        state = read_json(cand, "log_history", notes)
        run.sources.append(cand)
        if not isinstance(state, dict):
            run.notes.extend(notes or [ReadNote(cand, "is not a JSON object")])
            continue
        last = _last_step(state)
        if best is None or last > best[0]:
            if best is not None:
                run.notes.extend(best[3])
            best = (last, cand, state, notes)
        else:
            run.notes.extend(notes)
    if best is None:
        return run
    _, chosen, state, notes = best
    run.notes.extend(notes)
    run.config["trainer_state"] = chosen
    for key in _CONFIG_KEYS:
        if number(state.get(key)) is not None:
            run.config[key] = state[key]
    if state.get("_truncated"):  # the keys after `log_history` were lost: take them from a checkpoint's copy
        for cand in reversed(candidates):
            other = read_json(cand, None, []) if cand != chosen else None
            if isinstance(other, dict):
                for key in _CONFIG_KEYS:
                    if key not in run.config and number(other.get(key)) is not None:
                        run.config[key] = other[key]
                break
    _json_config(root, [d for _, d in ckpts], run)
    points = Points()
    _entries(state, chosen, points, run)
    points.into(run)
    for d in ("runs",):
        if os.path.isdir(os.path.join(root, d)):
            run.config["tensorboard_dir"] = os.path.join(root, d)
    return run


def _json_config(root: str, ckpt_dirs: list[str], run: RunHistory) -> None:
    """What the run's JSON files say was configured (never the pickled `training_args.bin`)."""
    args = os.path.join(root, "training_args.json")
    if os.path.isfile(args):
        doc = read_json(args, None, run.notes)
        run.sources.append(args)
        if isinstance(doc, dict):
            for key in _ARGS_KEYS:
                v = doc.get(key)
                if isinstance(v, (int, float, str, bool)):
                    run.config.setdefault(key, v)
    for folder in [root, *reversed(ckpt_dirs)]:  # the latest checkpoint's model config, else the root's
        path = os.path.join(folder, "config.json")
        if not os.path.isfile(path):
            continue
        doc = read_json(path, None, run.notes)
        run.sources.append(path)
        if isinstance(doc, dict):
            nested = doc.get("decoder") if isinstance(doc.get("decoder"), dict) else {}
            for key in _MODEL_KEYS:
                v = doc.get(key, nested.get(key))
                if number(v) is not None and not isinstance(v, bool):
                    run.config.setdefault(key, v)
        break
