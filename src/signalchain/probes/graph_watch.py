"""Watch a forward pass for the ops that take a value out of the autograd graph, and where.

A `TorchFunctionMode` sees every torch call. When an input requires grad and the result does not
(a `.detach()`, an integer cast, an op run under `no_grad`, a trip through numpy), the call is a
*graph break*; it is logged with the user's file and line. Results of a break are tainted, and so
is everything computed from them, so the break is placed at the first tapped value it cut off.
Module forward hooks share the same event counter, so a break can be placed after the last module
whose parameters lost their gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..records.optimisation import GraphBreak
from .base import Probe
from .frames import user_location
from .tensors import flat_tensors

__all__ = ["GraphWatch"]

_INT_CASTS = {"long", "int", "short", "char", "byte", "bool"}
_LEAVE = {"numpy", "item", "tolist", "__array__"}


class GraphWatch(Probe, TorchFunctionMode):
    """Use as a context manager around a forward pass, with `tap_wrapper(tap)` as the step's tap (the
    inner tap runs paused: recording copies values out of the graph, and that is ours, not a break);
    read `breaks` and `stage_order` afterwards."""

    def __init__(self) -> None:
        TorchFunctionMode.__init__(self)
        Probe.__init__(self)
        self.counter = 0
        self.stage_order: dict[str, int] = {}  # stage -> the event counter at its first tap
        self.stage_index = 0
        self.stage_names: list[str] = []
        self.breaks: list[GraphBreak] = []
        self._detached: dict[int, GraphBreak] = {}
        self._taint: dict[int, tuple[GraphBreak, ...]] = {}  # tensor id -> breaks it descends from
        self._keep: list[torch.Tensor] = []

    def tick(self) -> int:
        self.counter += 1
        return self.counter

    def on_tap(self, stage: str, value: Any) -> None:
        """Called by the tap wrapper (paused). A break is placed at the first tapped value it cut completely
        (the value descends from the break and no longer requires grad); a break whose values still
        carry a gradient through other paths stays at "grad" (set by the judge)."""
        self.stage_order.setdefault(stage, self.tick())
        self.stage_names.append(stage)
        for t in flat_tensors(value):
            for brk in self._taint.get(id(t), ()):
                if brk.stage is None and not t.requires_grad:
                    brk.stage = stage

    def _log(self, op: str, kind: str, out: Any) -> None:
        brk = GraphBreak(op=op, kind=kind, stage=None, location=user_location(), order=self.tick())
        self.breaks.append(brk)
        if isinstance(out, torch.Tensor):
            self._detached[id(out)] = brk
        self._mark(flat_tensors(out), (brk,))

    def _mark(self, outs: list[torch.Tensor], breaks: tuple[GraphBreak, ...]) -> None:
        for o in outs:
            self._keep.append(o)  # keep it alive so its id is not reused during the pass
            merged = self._taint.get(id(o), ()) + breaks
            self._taint[id(o)] = tuple({id(b): b for b in merged}.values())

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        name = getattr(func, "__name__", "")
        if name == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", "data")
        ins = flat_tensors(args) + flat_tensors(kwargs)
        if name == "numpy" and ins and id(ins[0]) in self._detached:
            self._detached[id(ins[0])].kind = "numpy round trip"
            return out
        inherited = tuple(b for t in ins for b in self._taint.get(id(t), ()))
        if inherited:
            self._mark(flat_tensors(out), inherited)
        needs = [t for t in ins if t.requires_grad]
        if not needs:
            return out
        outs = flat_tensors(out)
        if name in ("detach", "detach_", "data"):
            self._log(name, "detach", out)
        elif name in _LEAVE:
            self._log(name, "leaves torch", out)
        elif outs and all(not o.requires_grad for o in outs):
            if any(not (o.is_floating_point() or o.is_complex()) for o in outs):
                if name in _INT_CASTS or name in ("to", "type", "round"):
                    self._log(name, "integer cast", out)
            elif not torch.is_grad_enabled():
                self._log(name, "no_grad", out)
        return out
