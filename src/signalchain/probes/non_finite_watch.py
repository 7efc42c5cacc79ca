"""Watch every aten op of a replayed step for the first one that makes a non-finite value.

A `TorchDispatchMode` sees each op below autograd and autocast, in the forward, in the backward
(the autograd engine runs its ops on this thread for CPU work) and in the optimizer step. Per op
it costs one sum of each floating output (NaN and inf survive a sum, so a finite sum proves the
output finite); only when that sum is not finite does it look closer. Module hooks keep the module
path, the optimizer's step hooks the phase, and the autograd node's metadata carries the forward
op, module and stage of every node, so a NaN born in the backward is named by its forward op.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.optim.optimizer as _optim
from torch.utils._python_dispatch import TorchDispatchMode

from ..records.numerics import OpEvent
from ..trace import Tap
from .base import Probe
from .frames import user_location
from .tensors import LOW_PRECISION as _LOW
from .tensors import flat_tensors, tensor_stats, upcast

__all__ = ["NonFiniteWatch"]
_KEY = "signalchain"
# How many events of each (kind, phase) are kept: the first is what matters, a few give context.
_QUOTA = {"born": 8, "state": 3, "fill": 2}  # born: room for dead ends before the cause
# After the first born/state event the watch looks a little further for context, then stops: later
# ops only carry the bad value on, and inspecting every one of them would cost more than the step.
_CONTEXT_OPS = 40


def _indexed(args: tuple, kwargs: dict[str, Any]) -> list[tuple[int, torch.Tensor]]:
    """(argument index, tensor) for every tensor among the arguments (-1 for keyword arguments)."""
    out = [(i, t) for i, a in enumerate(args) for t in flat_tensors(a)]
    return out + [(-1, t) for t in flat_tensors(kwargs)]


def _floats(obj: Any) -> list[torch.Tensor]:
    return [t for t in flat_tensors(obj) if t.is_floating_point() and t.numel() > 0]


def _maybe_nonfinite(t: torch.Tensor) -> bool:
    """False proves `t` finite; True may be a finite tensor whose sum overflowed (checked exactly after)."""
    return not math.isfinite(float(t.detach().sum(dtype=torch.float32)))


def _bad_rows(t: torch.Tensor, n: int = 16) -> list[int]:
    """The batch rows (first dimension) holding a non-finite value, the first `n` of them."""
    if t.dim() == 0:
        return []
    rows = (~torch.isfinite(t.detach())).reshape(t.shape[0], -1).any(-1)
    return [int(i) for i in rows.nonzero().flatten()[:n]]


def _flags(t: torch.Tensor) -> tuple[bool, bool]:
    return bool(torch.isnan(t).any()), bool(torch.isinf(t).any())


def _scalars(args: Any, kwargs: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, bool) or a is None:
            continue
        if isinstance(a, (int, float)):
            out.append(a if math.isfinite(a) else str(a))
        elif isinstance(a, torch.dtype):
            out.append(str(a).removeprefix("torch."))
    return out[:6]


def _deliberate(args: Any, kwargs: dict[str, Any]) -> bool:
    """A non-finite constant among the arguments: the op fills on purpose (a mask with -inf, a NaN pad)."""
    return any(isinstance(a, float) and not math.isfinite(a) for a in list(args) + list(kwargs.values()))


class NonFiniteWatch(Probe, TorchDispatchMode):
    """Use `with watch.active(model, optimizer):` around a replayed step; pass `watch.tap_wrapper(tap)`
    to the step; read `events` and `taps` afterwards."""

    def __init__(self, names: dict[int, str] | None = None, locations: bool = True,
                 params: dict[str, torch.Tensor] | None = None):
        TorchDispatchMode.__init__(self)
        Probe.__init__(self)
        self.names = names or {}  # data_ptr -> parameter / buffer / optimizer-moment name
        self.params = params or {}  # to name gradients (they do not exist yet when the watch starts)
        self.locations = locations
        self.counter = 0
        self.events: list[OpEvent] = []
        self.in_optimizer = False
        self.backward_seen = False
        self.failures: list[str] = []
        self._pending: list[tuple[torch.Tensor, tuple[str, str, int, int]]] = []
        self._kept: dict[tuple[str, str], int] = {}
        self._first_bad: int | None = None  # counter of the first born/state event
        self._born: dict[int, tuple[OpEvent, torch.Tensor]] = {}  # storage -> born event, until cleaned
        # storage -> the born event whose non-finite values it carries (its lineage), so that a value
        # that never reaches anything (cast to an integer, selected away) is told from the cause.
        # Keyed by address, with a weak reference to the storage: a freed storage's address is reused
        # by the allocator, and a new value there must not inherit the old value's events.
        self._lineage: dict[int, tuple[weakref.ref, tuple[OpEvent, ...]]] = {}
        self.stopped = False
        self._on_stage: Callable[[str, Any, int], None] | None = None
        self._info: dict[Any, tuple[bool, tuple[int, ...]]] = {}

    # ---- the phase and module path ------------------------------------------------------------

    def phase(self) -> str:
        if torch._C._current_autograd_node() is not None:
            self.backward_seen = True
            return "backward"
        if self.in_optimizer:
            return "optimizer"
        return "after backward" if self.backward_seen else "forward"

    @contextlib.contextmanager
    def active(self, *roots: Any) -> Iterator[NonFiniteWatch]:
        """The mode plus module and optimizer hooks, removed on exit whatever happens."""

        def opt_pre(opt: Any, args: Any, kwargs: Any) -> None:
            self.in_optimizer = True

        def opt_post(opt: Any, args: Any, kwargs: Any) -> None:
            self.in_optimizer = False

        self.hook(_optim.register_optimizer_step_pre_hook(opt_pre))
        self.hook(_optim.register_optimizer_step_post_hook(opt_post))
        try:
            with self.tracking_modules(*roots), self:
                yield self
        finally:
            self._flush()
            self.finish()
            self.remove_handles()

    #: The step's own tap (a user's, in the Monitor's replay) runs watched: its ops are the step's.
    watch_inner = True

    def tap_wrapper(self, inner: Tap | None = None,  # type: ignore[override]
                    on_stage: Callable[[str, Any, int], None] | None = None) -> Tap:
        """A `tap` that counts stages (an op's stage is a tap after it) and hands each value, with
        its order among the watch's events, to `on_stage`."""
        self._on_stage = on_stage
        return super().tap_wrapper(inner)

    def on_tap(self, stage: str, value: Any) -> None:
        self._flush()
        self.counter += 1
        try:
            self._reach(stage, value)
            if self._on_stage is not None:
                self._on_stage(stage, value, self.counter)
        except Exception as exc:  # never break the step we watch
            self.failures.append(f"tap {stage}: {type(exc).__name__}: {exc}")

    def _reach(self, stage: str, value: Any) -> None:
        """A tapped value that carries a born event's non-finite values: that event reached `stage`."""
        if not self._lineage:
            return
        for t in _floats(value):
            events = self._lineage_of(t)
            if events and _maybe_nonfinite(t):
                for ev in events:
                    ev.reached = ev.reached or stage
                if self._first_bad is None:
                    self._first_bad = self.counter

    def seed_inputs(self, items: list[tuple[str, torch.Tensor]]) -> None:
        """Non-finite tensors the batch holds before any code ran: each is an `input` event whose
        values are followed like a born one's, so that the verdict is the batch when they reach the
        loss, and a masked-away NaN pad is told from the cause when they do not."""
        for path, t in items:
            ev = OpEvent(order=self.counter, kind="input", op="batch", phase="forward", module="", stage=None,
                         dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape),
                         nan=int(torch.isnan(t).sum()), inf=int(torch.isinf(t).sum()), numel=t.numel(),
                         inputs=[{**tensor_stats(t), "examples": _bad_rows(t)}], target=path)
            self.events.append(ev)
            self._set_lineage(t, (ev,))

    def reach(self, stage: str, value: Any) -> None:
        """`value` is what the step gave back (its loss, the gradients): the events it carries reach it."""
        with self.ours():
            try:
                self._reach(stage, value)
            except Exception as exc:  # never break the step we watch
                self.failures.append(f"reach {stage}: {type(exc).__name__}: {exc}")

    def _inherited(self, tensors: list[torch.Tensor]) -> tuple[OpEvent, ...]:
        if not self._lineage:
            return ()
        found: dict[int, OpEvent] = {}
        for t in tensors:
            for ev in self._lineage_of(t):
                found[id(ev)] = ev
        return tuple(found.values())

    def _lineage_of(self, t: torch.Tensor) -> tuple[OpEvent, ...]:
        storage = t.untyped_storage()
        entry = self._lineage.get(storage.data_ptr())
        if entry is None or entry[0]() is not storage:  # none, or an old value's freed address
            return ()
        return entry[1]

    def _set_lineage(self, t: torch.Tensor, events: tuple[OpEvent, ...]) -> None:
        storage = t.untyped_storage()
        self._lineage[storage.data_ptr()] = (weakref.ref(storage), events)

    def finish(self) -> None:
        """Forward events (births and non-finite inputs) that reached neither a tap, the loss nor the
        gradients, when another event did, are dead ends (see OpEvent). A NaN born in the backward of a
        forward op (a `where` that hides log(0) in the forward but not in its gradient) counts as that
        op's value reaching the gradients."""
        born = [e for e in self.events if e.kind in ("born", "input") and e.phase == "forward"]
        sites = {e.forward_order for e in self.events if e.kind == "born" and e.phase == "backward"}
        for e in born:
            if e.reached is None and e.order in sites:
                e.reached = "gradients"
        if any(e.reached for e in born):
            for e in born:
                if e.reached is None:
                    e.kind = "dead end"

    # ---- the op stream --------------------------------------------------------------------------

    def _flush(self) -> None:
        """Tag the autograd nodes of the last forward op's outputs with (op, module, tap index)."""
        pending, self._pending = self._pending, []
        for t, info in pending:
            node = t.grad_fn
            if node is not None and _KEY not in node.metadata:
                node.metadata[_KEY] = info

    def _func_info(self, func: Any) -> tuple[bool, tuple[int, ...]]:
        info = self._info.get(func)
        if info is None:
            schema = func._schema
            written = tuple(
                i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
            )
            info = (bool(getattr(func, "is_view", False)), written)
            self._info[func] = info
        return info

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        if self._pending:
            self._flush()
        self.counter += 1
        is_view, written = self._func_info(func)
        if is_view:  # a view cannot create a value
            return func(*args, **kwargs)
        pre: list[tuple[bool, bool]] | None = None
        if written and not self.stopped:  # in-place: judge the inputs before the op overwrites them
            try:
                pre = [_flags(t) if _maybe_nonfinite(t) else (False, False)
                       for i in written if i < len(args) for t in _floats(args[i])]
            except Exception:
                pre = None
        out = func(*args, **kwargs)
        try:
            if written and self._born:
                self._cleaned(args, written)
            self._inspect(func, args, kwargs, out, pre, written)
        except Exception as exc:  # never break the step we watch
            if len(self.failures) < 5:
                self.failures.append(f"{func}: {type(exc).__name__}: {exc}")
        return out

    def _cleaned(self, args: tuple, written: tuple[int, ...]) -> None:
        """An in-place op made a just-born non-finite tensor finite again: a transient NaN that the code
        repairs on purpose (autograd's norm backward does `(g / norm).masked_fill_(norm == 0, 0)`)."""
        for i in written:
            for t in _floats(args[i]) if i < len(args) else []:
                hit = self._born.get(t.untyped_storage().data_ptr())
                if hit is not None and not _maybe_nonfinite(hit[1]):
                    ev = hit[0]
                    ev.kind = "transient"
                    del self._born[t.untyped_storage().data_ptr()]
                    self._kept[("born", ev.phase)] -= 1
                    firsts = [e.order for e in self.events if e.kind in ("born", "state")]
                    self._first_bad = min(firsts) if firsts else None

    def _inspect(self, func: Any, args: tuple, kwargs: dict, out: Any, pre: list[tuple[bool, bool]] | None,
                 written: tuple[int, ...]) -> None:
        outs = _floats(out)
        phase = self.phase()
        if phase == "forward" and outs and torch.is_grad_enabled():
            site = (str(func), self.modules[-1] if self.modules else "", self.taps, self.counter)
            self._pending = [(t, site) for t in outs]
        if self.stopped or (self._first_bad is not None and self.counter - self._first_bad > _CONTEXT_OPS):
            self.stopped = True
            return
        bad = [t for t in outs if _maybe_nonfinite(t)]
        if not bad:
            return
        flags = [_flags(t) for t in bad]
        out_nan, out_inf = any(f[0] for f in flags), any(f[1] for f in flags)
        if not (out_nan or out_inf):
            return  # the sum overflowed, the values are finite
        ins = _floats((args, kwargs)) if not written else \
            [t for i, a in enumerate(args) if i not in written for t in _floats(a)] + _floats(kwargs)
        in_flags = [_flags(t) for t in ins] + (pre or [])
        in_nan, in_inf = any(f[0] for f in in_flags), any(f[1] for f in in_flags)
        named = [(self.names[t.untyped_storage().data_ptr()], i, t) for i, t in _indexed(args, kwargs)
                 if t.untyped_storage().data_ptr() in self.names]
        if _deliberate(args, kwargs):
            kind = "fill"
        elif (out_nan and not in_nan) or (out_inf and not (in_inf or in_nan)):
            kind = "born"
        elif any(t.is_floating_point() and not bool(torch.isfinite(t).all()) for _, i, t in named if i not in written):
            kind = "state"  # read a non-finite parameter / buffer / moment
        elif pre and any(a or b for a, b in pre) and any(i in written for _, i, _ in named):
            kind = "state"  # updated a moment that was already non-finite
        else:
            kind = "carried"
        # an in-place op's target carried its own lineage in (`loss += term` keeps every term's)
        carried = ins + [t for i in written if i < len(args) for t in _floats(args[i])]
        if kind == "carried":  # a non-finite value travelling on: not news, but its lineage goes on
            inherited = self._inherited(carried)
            if inherited and len(self._lineage) < 100_000:
                for t in bad:
                    self._set_lineage(t, inherited)
            return
        if kind == "state":
            target = next((n for n, i, t in named if i in written or not bool(torch.isfinite(t).all())), None)
        else:
            target = next((n for n, i, _ in named if i in written), named[0][0] if named else None)
        key = (kind, phase)
        if self._kept.get(key, 0) >= _QUOTA[kind]:
            return
        self._kept[key] = self._kept.get(key, 0) + 1
        # A forward birth starts the short look-around only once its value reaches a tap: a dead end
        # (T5's log(0) bucket) must not stop the watch before the real cause comes.
        if kind != "fill" and self._first_bad is None and (kind != "born" or phase != "forward"):
            self._first_bad = self.counter
        ev = self._event(func, args, kwargs, bad, kind, phase, target, bool(written))
        self.events.append(ev)
        if kind == "born" and phase != "forward":  # made from values carrying earlier events: those reach the gradients
            for earlier in self._inherited(carried):
                earlier.reached = earlier.reached or "gradients"
        if kind == "born" and phase == "forward":  # NaN from an inf born earlier: both carry on here
            lineage = self._inherited(carried) + (ev,)
            for t in bad:
                self._set_lineage(t, lineage)
        if kind == "born" and len(self._born) < 8:
            self._born[bad[0].untyped_storage().data_ptr()] = (ev, bad[0])

    def _event(self, func: Any, args: tuple, kwargs: dict, bad: list[torch.Tensor], kind: str, phase: str,
               target: str | None, inplace: bool) -> OpEvent:
        first = bad[0]
        ev = OpEvent(order=self.counter, kind=kind, op=str(func), phase=phase,
                     module=self.modules[-1] if self.modules and phase == "forward" else "", stage=None,
                     dtype=str(first.dtype).removeprefix("torch."), shape=list(first.shape),
                     nan=sum(int(torch.isnan(t).sum()) for t in bad), inf=sum(int(torch.isinf(t).sum()) for t in bad),
                     numel=sum(t.numel() for t in bad),
                     inputs=[tensor_stats(t) for t in flat_tensors((args, kwargs))[:4]],
                     scalars=_scalars(args, kwargs), target=target, tap_index=self.taps)
        if ev.target is None and phase != "forward" and self.params:
            ptrs = {t.untyped_storage().data_ptr() for t in flat_tensors((args, kwargs))}
            ev.target = next((f"{n}.grad" for n, q in self.params.items()
                              if q.grad is not None and q.grad.untyped_storage().data_ptr() in ptrs), None)
        if phase == "backward":
            node = torch._C._current_autograd_node()
            info = node.metadata.get(_KEY) if node is not None else None
            ev.forward_op = type(node).__name__ if node is not None else None
            if info is not None:
                ev.forward_op, ev.module, ev.tap_index = f"{info[0]} ({type(node).__name__})", info[1], info[2]
                ev.forward_order = info[3]
        elif phase == "forward" and self.locations:
            ev.location = user_location()
        if kind == "born" and first.dtype in _LOW and not inplace:
            try:
                again = func(*upcast(args), **{k: upcast(v) for k, v in kwargs.items()})
                ev.fp32_finite = all(bool(torch.isfinite(t).all()) for t in _floats(again))
            except Exception:
                ev.fp32_finite = None
        return ev
