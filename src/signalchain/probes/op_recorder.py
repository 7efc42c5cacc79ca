"""Run a mixed-precision step in float32 without touching the pipeline's code, and record its ops.

`OpRecorder` is a dispatch mode below autocast. With `upcast=True` it turns every cast to float16 or
bfloat16 (autocast's and the user's own `.half()` / `.to(dtype)`) into a cast to float32 and feeds
float32 inputs to every op: the same code path, op for op, in full precision — so the ops of the
low-precision run and of its float32 twin line up one to one. It can also keep the outputs of the
ops that run before one given tap (the stage that diverged), to name the first op that parts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .base import Probe
from .frames import user_location
from .tensors import flat_tensors
from .tensors import upcast as _upcast

__all__ = ["OpRecorder", "RecordedOp"]


class RecordedOp:
    __slots__ = ("op", "module", "value", "dtype", "location")

    def __init__(self, op: str, module: str, value: torch.Tensor, dtype: str, location: str | None):
        self.op, self.module, self.value, self.dtype, self.location = op, module, value, dtype, location


class OpRecorder(Probe, TorchDispatchMode):
    """upcast: run in float32. span (lo, hi): keep the float outputs of the ops made while `lo <= taps
    made so far < hi` — after tap number lo, up to tap number hi (1-based) — at most `limit` of them.

    Use `with rec.tracking_modules(model), rec:` around the step, `rec.tap_wrapper(inner)` as its tap
    (the inner tap, signalchain's own recorder, runs paused)."""

    def __init__(self, upcast: bool = False, span: tuple[int, int] | None = None, limit: int = 4000,
                 locations: bool = False):
        TorchDispatchMode.__init__(self)
        Probe.__init__(self)
        self.upcast = upcast
        self.span = span
        self.limit = limit
        self.locations = locations
        self.ops: list[RecordedOp] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        if self.upcast:
            written = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
            if not written:
                args, kwargs = _upcast(args), {k: _upcast(v) for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        if self.span is not None and self.span[0] <= self.taps < self.span[1] and len(self.ops) < self.limit \
                and not getattr(func, "is_view", False):
            floats = [t for t in flat_tensors(out) if t.is_floating_point() and t.numel() > 0]
            if floats:
                t = floats[0]
                self.ops.append(RecordedOp(str(func), self.modules[-1] if self.modules else "",
                                           t.detach().float().clone(), str(t.dtype).removeprefix("torch."),
                                           user_location() if self.locations else None))
        return out
