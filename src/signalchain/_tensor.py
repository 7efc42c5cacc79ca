"""Turn whatever a user taps (torch tensors on any device, numpy arrays, scalars) into numpy.

Torch is never imported here: if `torch` is not in `sys.modules`, nothing can be a torch tensor.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["is_torch_tensor", "is_array", "to_numpy", "dtype_name", "device_name", "as_float"]

_RAISE: Any = object()


def is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or is_torch_tensor(value)


def dtype_name(value: Any) -> str:
    """`float32`, `bfloat16`, `int64`, … without the `torch.` prefix."""
    if is_torch_tensor(value):
        return str(value.dtype).removeprefix("torch.")
    if isinstance(value, np.ndarray):
        return str(value.dtype)
    return type(value).__name__


def device_name(value: Any) -> str:
    if is_torch_tensor(value):
        return str(value.device)
    return "cpu"


def to_numpy(value: Any) -> np.ndarray:
    """A detached CPU numpy copy. Low-precision floats numpy lacks (bfloat16, float8) become float32."""
    if isinstance(value, np.ndarray):
        return value
    if is_torch_tensor(value):
        import torch

        t = value.detach()
        if t.is_complex():
            t = t.resolve_conj()
        if t.dtype in (torch.bfloat16,) or "float8" in str(t.dtype):
            t = t.float()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.resolve_neg().numpy()
    return np.asarray(value)


def as_float(value: Any, default: Any = _RAISE) -> Any:
    """A loss or scalar (a tensor on any device, a numpy scalar, a number) as a Python float.

    Tensors are detached first (one device read). With `default`, a value that is not a number
    (None, a string, a tensor of several elements) gives `default`; without it, float()'s error.
    """
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        if default is _RAISE:
            raise
        return default
