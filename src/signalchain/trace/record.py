"""`StageRecord`: what one `tap` leaves in a trace: name, kind, shape, summary and maybe the value."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tensor import device_name, dtype_name, is_array, is_torch_tensor, to_numpy
from ..findings import jsonable
from ..stats import (
    audio_summary,
    json_summary,
    scalar_summary,
    tensor_summary,
    text_summary,
)
from .vocabulary import is_audio_stage

__all__ = ["KINDS", "StageRecord", "make_record", "infer_kind"]

KINDS = ("tensor", "audio", "text", "json", "scalar")


@dataclass
class StageRecord:
    """One stage of one run. `value` is None unless full values were asked for."""

    name: str
    order: int
    kind: str
    dtype: str
    shape: list[int]
    device: str
    summary: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    value: Any = None

    @property
    def has_value(self) -> bool:
        return self.value is not None

    @property
    def sample_rate(self) -> int | None:
        sr = self.meta.get("sample_rate")
        return int(sr) if sr else None

    def header(self) -> dict[str, Any]:
        """Everything but the value, as plain JSON."""
        return {
            "name": self.name,
            "order": self.order,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "device": self.device,
            "summary": self.summary,
            "meta": self.meta,
        }


def _is_text(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, str) for v in value)


def infer_kind(name: str, value: Any, meta: dict[str, Any]) -> str:
    if _is_text(value):
        return "text"
    if isinstance(value, (bool, int, float, np.number)) and not isinstance(value, np.ndarray):
        return "scalar"
    if is_array(value):
        if len(value.shape) == 0:
            return "scalar"
        floating = "float" in dtype_name(value) or "bfloat" in dtype_name(value)
        if floating and (is_audio_stage(name) or "sample_rate" in meta):
            return "audio"
        return "tensor"
    if isinstance(value, (dict, list, tuple)):
        if isinstance(value, (list, tuple)) and value and all(is_array(v) for v in value):
            return "tensor"  # a list of arrays: stacked when shapes agree
        return "json"
    return "json"


def make_record(name: str, order: int, value: Any, meta: dict[str, Any], keep_value: bool) -> StageRecord:
    """Summarise `value`; keep a private copy of it when `keep_value` (training may mutate it later)."""
    meta = jsonable(meta)
    kind = infer_kind(name, value, meta)
    if kind == "text":
        texts = [value] if isinstance(value, str) else [str(v) for v in value]
        return StageRecord(name, order, kind, "str", [len(texts)], "cpu", text_summary(texts), meta,
                           texts if keep_value else None)
    if kind == "scalar":
        dtype, device = dtype_name(value), device_name(value)
        v = float(to_numpy(value).item()) if is_array(value) else float(value)
        if is_torch_tensor(value):
            meta["requires_grad"] = bool(value.requires_grad)
            meta["grad_fn"] = type(value.grad_fn).__name__ if value.grad_fn is not None else None
        return StageRecord(name, order, kind, dtype, [], device, scalar_summary(v), meta,
                           v if keep_value else None)
    if kind in ("tensor", "audio"):
        dtype, device = dtype_name(value) if is_array(value) else "list", device_name(value)
        if isinstance(value, (list, tuple)):
            arr = np.stack([to_numpy(v) for v in value])
            device = device_name(value[0])
            dtype = dtype_name(value[0])
        else:
            arr = to_numpy(value)
        summary = tensor_summary(arr)
        if kind == "audio":
            summary["audio"] = audio_summary(arr, meta.get("sample_rate"), meta.get("lengths"))
        kept = np.array(arr, copy=True) if keep_value else None
        if is_torch_tensor(value):
            # Whether the value is still attached to the autograd graph: where a gradient path is
            # cut (a detach, an integer cast, a no_grad block) shows up as the first model stage
            # that stopped requiring grad.
            meta["requires_grad"] = bool(value.requires_grad)
            meta["grad_fn"] = type(value.grad_fn).__name__ if value.grad_fn is not None else None
        return StageRecord(name, order, kind, dtype, list(arr.shape), device, summary, meta, kept)
    data = jsonable(value)
    return StageRecord(name, order, "json", type(value).__name__, [len(data)] if isinstance(data, list) else [],
                       "cpu", json_summary(data), meta, copy.deepcopy(data) if keep_value else None)
