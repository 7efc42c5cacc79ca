"""Find checkpoints on disk, order them by step, and load them without ever unpickling.

Formats, read directly (no transformers or Lightning import):

- torch files (`.pt`, `.pth`, `.bin`, `.ckpt`) with `torch.load(weights_only=True, map_location="cpu")`
  only: a payload holding Python objects is refused by torch's restricted unpickler and the
  checkpoint is skipped. Dict layouts: the weights under `model`, `state_dict`, `model_state_dict`
  or `module`; the optimizer under `optimizer`, `optimizer_state_dict` or Lightning's
  `optimizer_states[0]`; the scheduler under `scheduler`, `lr_scheduler` or `lr_schedulers[0]`;
  the step under `step` or `global_step`. A dict of tensors alone is a bare state dict.
- `.safetensors` (`safetensors.torch.load_file`): weights only; a `step`/`global_step` in its
  metadata orders it.
- Hugging Face `save_pretrained` / Trainer `checkpoint-N/` folders: `model.safetensors` (or its
  sharded index) or `pytorch_model.bin` (or its index), with `optimizer.pt`, `scheduler.pt` and
  `trainer_state.json` (`global_step`) when present.

Which: a folder's checkpoint files, or its `checkpoint-N/` folders when it has any (a Trainer's
`output_dir`, whose top level holds the final export and the pickled `training_args.bin`); a glob's
matches; never `training_args.bin`, `optimizer.pt`, `scheduler.pt`, `scaler.pt` or `rng_state*`.
Order: the stored step, else the last number in the name (`step=500` before `epoch=`), ties and
the unnumbered by natural sort of the name. Every failure is a `CheckpointLoadError` naming the
file and what is wrong; the caller turns it into a skip.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...audio._files import check_path, display_path, read_regular
from ...errors import SignalchainError

__all__ = ["CheckpointFile", "LoadedCheckpoint", "CheckpointLoadError", "find_checkpoints", "in_step_range",
           "load_checkpoint_file", "SUFFIXES"]

SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_MODEL_KEYS = ("model", "state_dict", "model_state_dict", "module")
_OPTIMIZER_KEYS = ("optimizer", "optimizer_state_dict")
_SCHEDULER_KEYS = ("scheduler", "lr_scheduler")
_STEP_KEYS = ("step", "global_step")
_JSON_LIMIT = 64 << 20
#: Files a Trainer writes beside its weights that are not checkpoints (training_args.bin is a pickle).
_NOT_CHECKPOINTS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")


class CheckpointLoadError(SignalchainError):
    """A checkpoint that cannot be loaded safely; the message says which file and why."""


@dataclass
class CheckpointFile:
    path: Path
    kind: str  # "torch", "safetensors", "hf-dir"
    step: int | None = None  # stored step, else the number in the name

    @property
    def name(self) -> str:
        return display_path(self.path.name)


@dataclass
class LoadedCheckpoint:
    model_state: dict[str, Any]
    optimizer_state: dict[str, Any] | None = None
    scheduler_state: dict[str, Any] | None = None
    step: int | None = None
    notes: list[str] = field(default_factory=list)


def _natural_key(name: str) -> list[Any]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _name_step(name: str) -> int | None:
    m = re.search(r"(?:step|global_step)[=_-]?(\d+)", name) or re.search(r"(\d+)(?!.*\d)", name)
    return int(m.group(1)) if m else None


def _is_hf_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in _HF_WEIGHTS)


def _is_candidate(path: Path) -> bool:
    if _is_hf_dir(path):
        return True
    name = path.name.lower()
    return path.suffix.lower() in SUFFIXES and not path.is_dir() and name not in _NOT_CHECKPOINTS and \
        not name.startswith("rng_state")


def _candidates(pattern: str) -> list[Path]:
    p = Path(pattern)
    if not p.is_dir():
        return [e for e in (Path(m) for m in sorted(glob.glob(pattern, recursive=True))) if _is_candidate(e)]
    picked = [e for e in sorted(p.iterdir()) if _is_candidate(e)]
    folders = [e for e in picked if e.is_dir()]
    if folders:  # a Trainer's output_dir: its checkpoint-N/ folders (the top level holds the final export)
        return folders
    return [p] if _is_hf_dir(p) else picked  # a checkpoint folder given alone is one checkpoint


def _int_step(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _stored_step(path: Path, kind: str) -> int | None:
    """The step a checkpoint stores, read cheaply (tensors memory-mapped, not read); None when unknown."""
    try:
        if kind == "hf-dir":
            state = _read_json(path / "trainer_state.json") if (path / "trainer_state.json").is_file() else {}
            return _int_step(state.get("global_step"))
        if kind == "safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as fh:
                meta = fh.metadata() or {}
            return next((s for k in _STEP_KEYS if (s := _int_step(meta.get(k))) is not None), None)
        obj = _torch_load(path, mmap=True)
        return _step_of(obj) if isinstance(obj, Mapping) else None
    except Exception:  # unreadable now: ordered by its name; the probe's load says why it is skipped
        return None


def find_checkpoints(pattern: str) -> list[CheckpointFile]:
    """Checkpoints in a folder or matching a glob, ordered by step (stored, else from the name)."""
    found = []
    for path in _candidates(pattern):
        kind = "hf-dir" if path.is_dir() else ("safetensors" if path.suffix.lower() == ".safetensors" else "torch")
        step = _stored_step(path, kind) if check_path(path).regular or kind == "hf-dir" else None
        found.append(CheckpointFile(path, kind, step if step is not None else _name_step(path.name)))
    return sorted(found, key=lambda c: (c.step is None, c.step if c.step is not None else 0, _natural_key(c.path.name)))


def in_step_range(files: list[CheckpointFile], first: int | None, last: int | None) -> list[CheckpointFile]:
    """The checkpoints whose step is in first..last (None: open on that side); those without a step are out.
    `bisect --steps` and the line `signalchain history` prints select with this one function."""
    return [f for f in files if f.step is not None and (first is None or f.step >= first)
            and (last is None or f.step <= last)]


# ---- loading --------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_regular(path, _JSON_LIMIT).decode("utf-8"))
    except (SignalchainError, UnicodeError, ValueError) as exc:
        raise CheckpointLoadError(f"{display_path(path)}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointLoadError(f"{display_path(path)}: expected a JSON object, found {type(data).__name__}")
    return data


def _torch_load(path: Path, mmap: bool = False) -> Any:
    import pickle

    import torch

    state = check_path(path)
    if not state.regular:
        raise CheckpointLoadError(f"{display_path(path)}: {state.detail or 'not a regular file'}")
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointLoadError(f"{display_path(path)}: refused by torch.load(weights_only=True), it holds "
                                  f"Python objects that only a full unpickle would build ({first[:200]})") from None
    except Exception as exc:
        raise CheckpointLoadError(f"{display_path(path)}: not a loadable torch checkpoint "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _safetensors_load(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    state = check_path(path)
    if not state.regular:
        raise CheckpointLoadError(f"{display_path(path)}: {state.detail or 'not a regular file'}")
    try:
        return dict(load_file(str(path), device="cpu"))
    except Exception as exc:
        raise CheckpointLoadError(f"{display_path(path)}: not a loadable safetensors file "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _is_state_dict(obj: Any) -> bool:
    import torch

    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def _step_of(obj: Mapping[str, Any]) -> int | None:
    return next((s for k in _STEP_KEYS if (s := _int_step(obj.get(k))) is not None), None)


def _first_of(obj: Mapping[str, Any], keys: tuple[str, ...], listed: str) -> dict[str, Any] | None:
    for k in keys:
        if isinstance(obj.get(k), Mapping):
            return dict(obj[k])
    items = obj.get(listed)
    if isinstance(items, (list, tuple)) and items and isinstance(items[0], Mapping):
        return dict(items[0])
    return None


def _from_torch_object(path: Path, obj: Any) -> LoadedCheckpoint:
    if _is_state_dict(obj):
        return LoadedCheckpoint(dict(obj), notes=["a bare state dict: no optimizer state"])
    if not isinstance(obj, Mapping):
        raise CheckpointLoadError(f"{display_path(path)}: holds a {type(obj).__name__}, not a state dict or a "
                                  "dict of model/optimizer states")
    model = next((dict(obj[k]) for k in _MODEL_KEYS if _is_state_dict(obj.get(k))), None)
    if model is None:
        raise CheckpointLoadError(f"{display_path(path)}: no model weights under any of {', '.join(_MODEL_KEYS)} "
                                  f"(its keys: {', '.join(map(str, list(obj)[:12]))})")
    return LoadedCheckpoint(model, _first_of(obj, _OPTIMIZER_KEYS, "optimizer_states"),
                            _first_of(obj, _SCHEDULER_KEYS, "lr_schedulers"), _step_of(obj))


def _hf_weights(folder: Path) -> dict[str, Any]:
    for index_name, loader in (("model.safetensors.index.json", _safetensors_load),
                               ("pytorch_model.bin.index.json", _torch_load)):
        if (folder / index_name).is_file():
            weight_map = _read_json(folder / index_name).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointLoadError(f"{display_path(folder / index_name)}: no weight_map")
            state: dict[str, Any] = {}
            for shard in sorted(set(map(str, weight_map.values()))):
                if Path(shard).name != shard:
                    raise CheckpointLoadError(f"{display_path(folder / index_name)}: shard {shard!r} is not a "
                                              "file name")
                part = loader(folder / shard)
                if not _is_state_dict(part):
                    raise CheckpointLoadError(f"{display_path(folder / shard)}: not a state dict")
                state.update(part)
            return state
    if (folder / "model.safetensors").is_file():
        return _safetensors_load(folder / "model.safetensors")
    obj = _torch_load(folder / "pytorch_model.bin")
    if not _is_state_dict(obj):
        raise CheckpointLoadError(f"{display_path(folder / 'pytorch_model.bin')}: not a state dict")
    return dict(obj)


def _load_hf_dir(folder: Path) -> LoadedCheckpoint:
    ckpt = LoadedCheckpoint(_hf_weights(folder))
    for name, attr in (("optimizer.pt", "optimizer_state"), ("scheduler.pt", "scheduler_state")):
        if (folder / name).is_file():
            try:
                obj = _torch_load(folder / name)
                setattr(ckpt, attr, dict(obj) if isinstance(obj, Mapping) else None)
            except CheckpointLoadError as exc:  # the weights still load: say so and go on without this part
                ckpt.notes.append(f"{name} not loaded: {exc}")
    if (folder / "trainer_state.json").is_file():
        ckpt.step = _int_step(_read_json(folder / "trainer_state.json").get("global_step"))
    if ckpt.optimizer_state is None and not any(n.startswith("optimizer.pt") for n in ckpt.notes):
        ckpt.notes.append("no optimizer.pt: the optimizer state is absent")
    return ckpt


def load_checkpoint_file(ckpt: CheckpointFile) -> LoadedCheckpoint:
    """Load `ckpt` onto the CPU; `CheckpointLoadError` when it cannot be loaded safely."""
    if ckpt.kind == "hf-dir":
        if os.path.islink(ckpt.path):
            raise CheckpointLoadError(f"{display_path(ckpt.path)}: a symlinked folder; give the folder itself")
        return _load_hf_dir(ckpt.path)
    if ckpt.kind == "safetensors":
        state = _safetensors_load(ckpt.path)
        if not state:
            raise CheckpointLoadError(f"{display_path(ckpt.path)}: holds no tensors")
        return LoadedCheckpoint(state, notes=["safetensors holds weights only: the optimizer state is absent"])
    return _from_torch_object(ckpt.path, _torch_load(ckpt.path))
