"""Read what a finished (or dead) run left behind: its logs and checkpoints, without re-running it.

`read(path)` detects the format at `path` and returns a `records.history.RunHistory` whose series
have their roles assigned (`roles.assign`). Readers never raise on a damaged or partial log: they
read what they can and add a `ReadNote` per part they skipped. A path that holds no log they know
is a `HistoryReadError` naming it and what was looked for.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from ..errors import SignalchainError
from ..records.history import Checkpoint, RunHistory
from .audiocraft import is_audiocraft, read_audiocraft
from .csv_logs import is_lightning_csv, is_wandb_csv, read_csv_log
from .hf_trainer import is_hf_trainer, read_hf_trainer
from .roles import assign
from .tensorboard import is_tensorboard, read_tensorboard

__all__ = ["read", "FORMATS", "HistoryReadError", "detect", "checkpoint_files"]


class HistoryReadError(SignalchainError):
    """No log signalchain can read at the path (the message says what was looked for)."""


def _wandb_offline(path: str) -> bool:
    return (
        os.path.isdir(path)
        and any(n.startswith(("offline-run-", "run-")) and n != "run" for n in os.listdir(path))
        and any(f.endswith(".wandb") for _, _, fs in os.walk(path) for f in fs)
    )


def _read_wandb_offline(path: str) -> RunHistory:
    # a .wandb file is wandb's own record stream: only the wandb package reads it faithfully
    why = (
        "signalchain does not read them yet"
        if importlib.util.find_spec("wandb") is not None
        else "install wandb to read them, or"
    )
    raise HistoryReadError(
        f"{path} is a wandb offline run folder: its .wandb files are read through the wandb package; {why} "
        "export the run's history as CSV (`wandb sync` it, then `wandb.Api().run(...).history().to_csv(...)`, "
        "or the run page's CSV export) and run `signalchain history` on the CSV"
    )


#: name -> (detect, read, what it looks for), in the order detection tries them.
FORMATS: dict[str, tuple[Callable[[str], bool], Callable[[str], RunHistory], str]] = {
    "hf-trainer": (is_hf_trainer, read_hf_trainer, "trainer_state.json (or checkpoint-N/trainer_state.json)"),
    "audiocraft": (is_audiocraft, read_audiocraft, "history.json (AudioCraft/Dora)"),
    "lightning-csv": (
        is_lightning_csv,
        lambda p: read_csv_log(p, "lightning-csv"),
        "metrics.csv (Lightning CSVLogger)",
    ),
    "wandb-csv": (is_wandb_csv, lambda p: read_csv_log(p, "wandb-csv"), "a W&B history CSV (_step column)"),
    "tensorboard": (is_tensorboard, read_tensorboard, "events.out.tfevents.* (TensorBoard)"),
    "wandb-offline": (_wandb_offline, _read_wandb_offline, "wandb/offline-run-*/ (needs the wandb package)"),
}


def detect(path: str) -> str:
    if not os.path.exists(path):
        raise HistoryReadError(f"{path}: no such file or folder")
    for name, (test, _, _) in FORMATS.items():
        try:
            if test(path):
                return name
        except OSError:
            continue
    looked = "; ".join(what for _, _, what in FORMATS.values())
    nested = _nested_logs(path)
    hint = f"; logs one or two folders down: {', '.join(nested)} (name one of them)" if nested else ""
    raise HistoryReadError(f"{path} holds no run log signalchain reads; looked for: {looked}{hint}")


_LOG_NAMES = ("trainer_state.json", "metrics.csv", "history.json")


def _nested_logs(path: str, limit: int = 5) -> list[str]:
    """Known log files one or two folders below `path` (`lightning_logs/version_0/metrics.csv`), so the
    error can name them: a folder of several runs is not one run, and picking one would be a guess."""
    if not os.path.isdir(path):
        return []
    found: list[str] = []
    for folder, dirs, files in os.walk(path):
        depth = os.path.relpath(folder, path).count(os.sep) + (folder != path)
        dirs.sort()
        if depth >= 2:
            dirs[:] = []
        found.extend(os.path.relpath(os.path.join(folder, f), path) for f in sorted(files) if f in _LOG_NAMES)
        if len(found) >= limit:
            break
    return found[:limit]


def read(path: str | os.PathLike[str], fmt: str | None = None) -> RunHistory:
    """The run at `path` (a folder or a log file), roles assigned; `fmt` forces a format of `FORMATS`."""
    p = os.fspath(path)
    name = fmt or detect(p)
    if name not in FORMATS:
        raise HistoryReadError(f"unknown log format {name!r}; allowed: {', '.join(FORMATS)}")
    run = FORMATS[name][1](p)
    if name == "hf-trainer" and "tensorboard_dir" in run.config and not run.series:
        run = read_tensorboard(run.config["tensorboard_dir"])  # a state with no log: the events are the run
    if not run.checkpoints:
        run.checkpoints = checkpoint_files(p)
    return assign(run)


_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin")


def checkpoint_files(path: str) -> list[Checkpoint]:
    """Checkpoint files saved beside a log (the folder, its `checkpoints/`, and Lightning's
    `<version>/checkpoints/`), with the step their names give (`epoch=1-step=500.ckpt`, `ckpt_1200.pt`)."""
    from .run import step_of

    root = path if os.path.isdir(path) else os.path.dirname(path) or "."
    out = []
    for folder in (root, os.path.join(root, "checkpoints")):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for n in names:
            full = os.path.join(folder, n)
            step = step_of(n)
            if n.lower().endswith(_SUFFIXES) and step is not None and os.path.isfile(full) \
                    and n not in ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"):
                out.append(Checkpoint(step, full, complete=True, files=[n]))
    return sorted(out, key=lambda c: (c.step, c.path))
