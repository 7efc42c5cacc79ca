"""AudioCraft / Dora experiment folders: `history.json` and the checkpoints beside it.

Flashy's `BaseSolver` appends one dict per epoch to `history.json`, mapping each stage it ran to its
averaged metrics (`{"train": {"ce": .., "ce_q1": .., "ppl": .., "grad_norm": .., "lr": ..},
"valid": {...}, "evaluate": {...}}`); the series are named `<stage>/<metric>` on an epoch axis
(epoch 1 is the first entry). Checkpoints are `checkpoint.th` (the latest) and `checkpoint_<epoch>.th`
(kept ones); they are listed, never loaded here. `.hydra/config.yaml` gives the configured learning
rate (`optim.lr`) when PyYAML can read it.

The layout follows facebookresearch/audiocraft: `utils/checkpoint.py` `checkpoint_name` gives
`checkpoint_<name>.th(.<rank>)` (no name: the latest; `best`; or the epoch; `.<rank>` for the FSDP shards
of ranks > 0), written through `flashy.utils.write_and_rename` (a `.tmp` left behind is a save that
died); `solvers/base.py` `commit` appends the epoch's `{stage: metrics}` to the history, then
`save_checkpoints` names the kept copy with `epoch - 1` after that append, i.e. the number of history
entries, so `checkpoint_<N>.th` is the state after our epoch N.
"""

from __future__ import annotations

import os
import re

from ..records.history import Checkpoint, ReadNote, RunHistory
from ._jsonfile import read_json
from ._points import Points, number
from ._yamlfile import read_yaml

__all__ = ["is_audiocraft", "read_audiocraft"]

_CKPT = re.compile(r"^checkpoint(?:_(\d+))?\.th(\.tmp)?$")  # `_best` has no epoch; `.th.<rank>` shards are parts


def is_audiocraft(path: str) -> bool:
    if os.path.isfile(path):
        return os.path.basename(path) == "history.json"
    return os.path.isfile(os.path.join(path, "history.json"))


def read_audiocraft(path: str) -> RunHistory:
    root = os.path.dirname(path) if os.path.isfile(path) else path
    f = os.path.join(root, "history.json")
    run = RunHistory(root=path, format="audiocraft", axis="epoch")
    run.sources.append(f)
    hist = read_json(f, None, run.notes)
    if isinstance(hist, dict) and "history" in hist:
        hist = hist["history"]
    if not isinstance(hist, list):
        if hist is not None:
            run.notes.append(ReadNote(f, "is not a list of per-epoch entries"))
        hist = []
    points = Points()
    for epoch, entry in enumerate(hist, start=1):
        if not isinstance(entry, dict):
            run.notes.append(ReadNote(f, f"entry {epoch} is not a dict of stages: skipped", epoch))
            continue
        for stage, metrics in entry.items():
            if not isinstance(metrics, dict):
                continue
            for key, raw in metrics.items():
                value = number(raw)
                if value is not None:
                    points.add(f"{stage}/{key}", epoch, value, None, float(epoch), f)
    points.into(run)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    latest = len(hist)
    for name in names:
        m = _CKPT.match(name)
        if m:
            step = int(m.group(1)) if m.group(1) else latest
            full = os.path.join(root, name[: -len(".tmp")] if m.group(2) else name)
            done = m.group(2) is None
            if not done and any(c.path == full for c in run.checkpoints):
                continue  # the save of a newer copy died; the previous one is still whole
            run.checkpoints.append(Checkpoint(step, full, complete=done, files=[name]))
    run.checkpoints.sort(key=lambda c: (c.step, c.path))
    _config(os.path.join(root, ".hydra", "config.yaml"), run)
    return run


def _config(path: str, run: RunHistory) -> None:
    cfg = read_yaml(path, run, "not read")
    optim = cfg.get("optim") if isinstance(cfg, dict) else None
    if isinstance(optim, dict) and number(optim.get("lr")) is not None:
        run.config["learning_rate"] = float(optim["lr"])
    for key in ("card", "vocab_size"):
        if isinstance(cfg, dict) and number(cfg.get(key)) is not None:
            run.config[key] = cfg[key]
