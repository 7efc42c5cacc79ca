"""What the pipeline's `build_model` loaded: every `load_state_dict` call it made, watched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...probes.state_loads import StateLoads
from ...records.optimisation import StateLoadMeasurement
from .._seed import seed_everything
from ..context import Context

__all__ = ["measure_state_loads"]


def measure_state_loads(ctx: Context) -> StateLoadMeasurement | None:
    """Build the model once more under the watch; None when it loads no state dict and names no local
    checkpoint (nothing to judge)."""
    try:
        with StateLoads().attached_to() as probe:
            seed_everything(ctx.seed)
            model = ctx.pipeline.build_model(ctx.seed)
    except Exception as exc:  # build_model itself failing is the golden step's finding
        return StateLoadMeasurement(error=f"{type(exc).__name__}: {exc}")
    named = _against_named_checkpoint(model)
    return StateLoadMeasurement(calls=probe.calls, named_checkpoint=named) if probe.calls or named else None


def _against_named_checkpoint(model: Any) -> dict[str, Any] | None:
    """The model's tensors against the safetensors of the local folder its config names (constant
    tensors left out: a fresh init has the same ones and zeros)."""
    config = getattr(model, "config", None)
    where = getattr(config, "_name_or_path", None) or getattr(config, "name_or_path", None)
    if not where or not isinstance(model, torch.nn.Module):
        return None
    folder = Path(str(where))
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None  # a Hub name, or a folder without safetensors: nothing read from the network
    from safetensors import safe_open

    own = model.state_dict()
    compared = equal = 0
    groups: dict[str, list[int]] = {}  # first key component -> [compared, equal]
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for key in handle.keys():
                mine = own.get(key)
                if mine is None or not mine.dtype.is_floating_point:
                    continue
                theirs = handle.get_tensor(key)
                if tuple(theirs.shape) != tuple(mine.shape) or theirs.numel() < 2:
                    continue
                if bool((theirs == theirs.flatten()[0]).all()):
                    continue  # a constant tensor (a norm's ones, a bias's zeros): equal to any fresh init
                same = bool(torch.equal(theirs.to(mine.dtype).cpu(), mine.detach().cpu()))
                compared += 1
                equal += same
                g = groups.setdefault(key.split(".")[0], [0, 0])
                g[0] += 1
                g[1] += same
    floats = sum(1 for v in own.values() if v.dtype.is_floating_point)
    return {"path": str(folder), "compared": compared, "equal": equal, "model_tensors": floats,
            "groups": {k: {"compared": c, "equal": e} for k, (c, e) in sorted(groups.items())}}
