"""The golden batch of a live run's first step: its inputs, labels, logits and loss as a `Trace`.

Saved with `save_golden` so that `signalchain inspect`, `compare` and `bisect` can use it later.
Keys that mean a stage of DESIGN §2 are saved under that name (`labels` → `targets`, `logits`,
`loss`, `loss_per_codebook` → `loss.per_codebook`); every other tensor keeps its key name. A value
larger than `MAX_ELEMENTS` (a MusicGen logits tensor can be hundreds of MB) is left out, and the
provenance lists what was.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..golden.provenance import collect_provenance
from ..golden.store import save_golden
from ..probes.forward_tap import field
from ..trace import Trace, make_record
from ._codebooks import PER_CODEBOOK_KEYS

__all__ = ["STAGE_OF", "first_step_trace", "save_first_step"]

STAGE_OF = {"labels": "targets", "logits": "logits", "loss": "loss",
            **{k: "loss.per_codebook" for k in PER_CODEBOOK_KEYS}}
MAX_ELEMENTS = 1 << 24


def _named_tensors(batch: Any, prefix: str = "batch") -> list[tuple[str, Any]]:
    """(key, value) pairs of a batch: a mapping's keys, a sequence's `batch.i`, a lone tensor `batch`."""
    if isinstance(batch, Mapping):
        return [(str(k), v) for k, v in batch.items()]
    if isinstance(batch, (list, tuple)):
        return [(f"{prefix}.{i}", v) for i, v in enumerate(batch)]
    return [(prefix, batch)]


def first_step_trace(batch: Any, output: Any, loss: Any,
                     extra: list[tuple[str, Any, dict[str, Any]]] = ()) -> tuple[Trace, list[str]]:
    """A trace (values kept) of one step; also the names left out as too large. `extra`: (stage,
    value, meta) records added after it (the codec's reconstruction of the labels)."""
    items = _named_tensors(batch)
    for key in ("logits", *PER_CODEBOOK_KEYS):
        value = field(output, key)
        if value is not None:
            items.append((key, value))
    if loss is not None:
        items.append(("loss", loss))
    chosen: dict[str, tuple[str, torch.Tensor]] = {}
    for key, value in items:  # a batch key `loss` and the model's loss: the model's (later) one trained
        if isinstance(value, torch.Tensor):
            chosen[STAGE_OF.get(key, key)] = (key, value)
    trace, omitted = Trace(), []
    for name, (key, value) in chosen.items():
        if value.numel() > MAX_ELEMENTS:
            omitted.append(name)
            continue
        value = value.detach()
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16
            value = value.float()
        trace.append(make_record(name, len(trace), value.cpu(), {"key": key}, keep_value=True))
    for name, value, meta in extra:
        if name not in trace:
            trace.append(make_record(name, len(trace), value, meta, keep_value=True))
    return trace, omitted


def save_first_step(path: Path, batch: Any, output: Any, loss: Any, *, source: str, step: int,
                    extra: list[tuple[str, Any, dict[str, Any]]] = ()) -> Path | None:
    trace, omitted = first_step_trace(batch, output, loss, extra)
    if not len(trace):
        return None
    provenance = {**collect_provenance(), "pipeline": source, "source": source, "step": step, "omitted": omitted}
    return save_golden(path, trace, provenance)
