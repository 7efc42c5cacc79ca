"""`StepRates`: the configured learning rate at work, what each real update does to each parameter group.

It hooks an optimizer's `step()` and records the rate each group uses at each step. Measuring (the
default), it also does this: Before a step it copies a spread of the group's tensors,
their gradients and their optimizer state; after it, it reads what the step did (the realised Δθ)
and recomputes the same step in float64 with a copy of the optimizer (same class, same group
settings, the copied state) at a rate of 1. That is the intended update per unit rate `u`: every
optimizer's step is linear in its rate (Adam's `lr·m̂/(√v̂+ε)`, SGD's `lr·buf`, weight decay's
`lr·λ·θ`), so `r·u` is the update at any rate `r`, and rounding `θ + r·u` to the tensor's dtype
says how much of it the dtype keeps. Nothing is assumed about the optimizer beyond
`type(opt)(param_groups)`; one that cannot be rebuilt so keeps only the realised measures.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..records.optimisation import GroupRate
from .base import Probe

__all__ = ["StepRates", "RATE_GRID", "group_lrs"]

#: The rates at which the share lost to rounding is told (4 a decade, 1e-14 … 1).
RATE_GRID: list[float] = [float(10.0 ** (k / 4)) for k in range(-56, 1)]
#: The share lost on the grid is told from at most this many values per group and step (a stride
#: through every measured tensor): a share, not a sum, needs no more.
GRID_VALUES = 1 << 14
#: At most this many values (whole tensors, spread over the group) are measured per group.
VALUE_BUDGET = 1 << 21
MAX_TENSORS = 48
#: Besides them, every tensor of at most this many values is measured (at most SMALL_TENSORS of them).
SMALL_TENSOR = 1 << 13
SMALL_TENSORS = 1024
#: A tensor whose update at its step's rate loses at least this share to rounding did not move
#: because of its rate.
UNRESOLVED = 0.99


def rate_of(value: Any) -> float | None:
    """A group's rate as a float (a tensor rate too); None when the group has none."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def group_lrs(optimizer: torch.optim.Optimizer) -> list[float | None]:
    """The rate each group will use at the next step."""
    return [rate_of(g.get("lr")) for g in optimizer.param_groups]


def _sample(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """Whole tensors spread evenly over the group, up to the value budget; and every small tensor
    (norm gains, biases: where an update rounds away first, and cheap to measure), so that a tensor
    left bit-identical by its rate is told from a skipped step in a large model too."""
    train = [p for p in params if p.requires_grad]
    if sum(p.numel() for p in train) <= VALUE_BUDGET:
        return train
    idx = sorted({int(round(i)) for i in np.linspace(0, len(train) - 1, min(len(train), MAX_TENSORS))})
    out, total = [], 0
    for i in idx:
        n = train[i].numel()
        if n <= VALUE_BUDGET - total or not out:
            out.append(train[i])
            total += n
    taken = {id(p) for p in out}
    out += [p for p in train if p.numel() <= SMALL_TENSOR and id(p) not in taken][:SMALL_TENSORS]
    return out


class _Acc:
    """Sums over the steps for one group."""

    def __init__(self, index: int, group: dict[str, Any]) -> None:
        params = [p for p in group["params"] if p.requires_grad]
        dtypes = Counter(str(p.dtype).removeprefix("torch.") for p in params)
        self.rec = GroupRate(group=index, tensors=len(params), values=sum(p.numel() for p in params),
                             dtype=dtypes.most_common(1)[0][0] if dtypes else "float32",
                             configured_lr=rate_of(group.get("initial_lr", group.get("lr"))))
        self.sample = _sample(list(group["params"]))
        self.rec.sampled = sum(p.numel() for p in self.sample)
        self.stride = max(1, -(-self.rec.sampled // GRID_VALUES))
        self.err2 = 0.0  # Σ (realised - intended)² at the steps' rates
        self.int2 = 0.0  # Σ intended²
        self.grid_err2 = np.zeros(len(RATE_GRID))
        self.grid_int2 = np.zeros(len(RATE_GRID))
        self.ratios: list[float] = []
        self.unit_ratios: list[float] = []
        self.eps_hits = 0
        self.eps_total = 0


class StepRates(Probe):
    """`with StepRates(optimizer, names).attached_to() as probe:` around some real updates; then
    `probe.step_lrs` (each group's rate at each step), `probe.groups()` and `probe.below_resolution()`.
    With `measure=False` only the rates are recorded (no copies, no recomputed step)."""

    def __init__(self, optimizer: torch.optim.Optimizer, names: dict[int, str] | None = None,
                 measure: bool = True) -> None:
        super().__init__()
        self.optimizer = optimizer
        self.names = names or {}
        self.measure = measure
        self.step_lrs: list[list[float | None]] = []
        self.accs = [_Acc(i, g) for i, g in enumerate(optimizer.param_groups)] if measure else []
        self._snap: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]] = []
        self._lrs: list[float | None] = []
        # per tensor name: every measured step left its update unresolved (rate 0 or lost to rounding)
        self._unresolved: dict[str, bool] = {}

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[StepRates]:
        """Hook the optimizer's step for the block; the handles are removed on exit."""
        with self.attached():
            self.hook(self.optimizer.register_step_pre_hook(self._pre))
            if self.measure:
                self.hook(self.optimizer.register_step_post_hook(self._post))
            yield self

    # ---- hooks ------------------------------------------------------------------------------------

    def _pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._snap = []
        self._lrs = group_lrs(self.optimizer)
        self.step_lrs.append(list(self._lrs))
        for acc in self.accs:
            for p in acc.sample:
                g = p.grad
                if g is None or g.is_sparse:
                    continue
                state = {k: (v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v))
                         for k, v in self.optimizer.state.get(p, {}).items()}
                self._snap.append((acc.rec.group, p, p.detach().clone(), g.detach().clone(), state))

    def _post(self, opt: Any, args: Any, kwargs: Any) -> None:
        with torch.no_grad():
            for acc, group, lr in zip(self.accs, self.optimizer.param_groups, self._lrs):
                acc.rec.step_lrs.append(lr)
                items = [s for s in self._snap if s[0] == acc.rec.group]
                if items:
                    self._measure(acc, group, lr, items)
        self._snap = []

    # ---- one step of one group -------------------------------------------------------------------

    def _unit_update(self, acc: _Acc, group: dict[str, Any], items: list[Any]) -> list[torch.Tensor] | None:
        """The step recomputed in float64 at rate 1 (at the group's own rate when it has none)."""
        try:
            hyper = {k: v for k, v in group.items() if k != "params"}
            if rate_of(hyper.get("lr")) is not None:
                hyper["lr"] = 1.0
            for key, off in (("foreach", None), ("fused", None), ("capturable", False), ("differentiable", False)):
                if key in hyper:
                    hyper[key] = off
            shadows = []
            for _, _, before, grad, _ in items:
                q = torch.nn.Parameter(before.double(), requires_grad=True)
                q.grad = grad.double()
                shadows.append(q)
            shadow = type(self.optimizer)([{"params": shadows, **hyper}])
            for q, (_, _, _, _, state) in zip(shadows, items):
                shadow.state[q] = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() and k != "step"
                                       else v) for k, v in state.items()}
            shadow.step()
            return [q.detach() - before.double() for q, (_, _, before, _, _) in zip(shadows, items)]
        except Exception as exc:  # an optimizer that cannot be rebuilt so: realised measures only
            acc.rec.shadow_error = f"{type(exc).__name__}: {exc}"[:300]
            return None

    def _measure(self, acc: _Acc, group: dict[str, Any], lr: float | None, items: list[Any]) -> None:
        units = self._unit_update(acc, group, items) if acc.rec.shadow_error is None else None
        scale = lr if lr is not None else 1.0  # no rate of its own: the recomputed step is the intended one
        moved2 = theta2 = unit2 = 0.0
        grid = torch.tensor(RATE_GRID, dtype=torch.float64)
        for k, (_, p, before, grad, _) in enumerate(items):
            after = p.detach()
            nz = grad != 0
            n_nz = int(nz.sum())
            acc.rec.with_grad += n_nz
            b64 = before.double()
            real = after.double() - b64
            moved2 += float(real.square().sum())
            theta2 += float(b64.square().sum())
            if lr is None or lr > 0:
                acc.rec.stuck += int((nz & (after == before)).sum())
            name = self.names.get(id(p))
            unresolved = lr == 0
            if units is not None:
                u = units[k]
                unit2 += float(u.square().sum())
                want = scale * u
                err2 = float((real - want).square().sum())
                int2 = float(want.square().sum())
                acc.err2 += err2
                acc.int2 += int2
                unresolved = unresolved or (int2 > 0 and err2 >= UNRESOLVED ** 2 * int2)
                if lr is not None:
                    self._grid(acc, b64, u, before.dtype, grid)
            self._eps(acc, group, p, nz, n_nz)
            if name is not None and n_nz:
                self._unresolved[name] = self._unresolved.get(name, True) and bool(unresolved)
        if theta2 > 0:
            acc.ratios.append(float(np.sqrt(moved2 / theta2)))
            if units is not None:
                acc.unit_ratios.append(float(np.sqrt(unit2 / theta2)))

    def _grid(self, acc: _Acc, b64: torch.Tensor, u: torch.Tensor, dtype: torch.dtype, grid: torch.Tensor) -> None:
        """Σ(rounding error)² and Σ(intended)² at every rate of the grid, in chunks of values."""
        flat_b, flat_u = b64.flatten()[::acc.stride], u.flatten()[::acc.stride]
        keep = flat_u != 0
        flat_b, flat_u = flat_b[keep], flat_u[keep]
        if flat_u.numel() == 0:
            return
        uu = float(flat_u.square().sum())
        want = grid[:, None] * flat_u[None, :]  # [R, n]
        got = (flat_b[None, :] + want).to(dtype).double() - flat_b[None, :]
        acc.grid_err2 += (got - want).square().sum(dim=1).numpy()
        acc.grid_int2 += uu * np.square(RATE_GRID)

    def _eps(self, acc: _Acc, group: dict[str, Any], p: torch.Tensor, nz: torch.Tensor, n_nz: int) -> None:
        """Adam's family divides by √v̂ + ε: where √v̂ < ε, ε (not the gradient) sets the step."""
        state = self.optimizer.state.get(p, {})
        eps, betas, v = group.get("eps"), group.get("betas"), state.get("exp_avg_sq")
        if not isinstance(eps, (int, float)) or not betas or not torch.is_tensor(v) or v.shape != p.shape or not n_nz:
            return
        t = rate_of(state.get("step")) or 1.0
        vhat = v.double() / max(1e-300, 1.0 - float(betas[1]) ** t)
        acc.rec.eps = float(eps)
        acc.eps_hits += int(((vhat.sqrt() < eps) & nz).sum())
        acc.eps_total += n_nz

    # ---- result -----------------------------------------------------------------------------------

    def groups(self) -> list[GroupRate]:
        out = []
        for acc in self.accs:
            r = acc.rec
            r.ratio = float(np.median(acc.ratios)) if acc.ratios else None
            r.unit_ratio = float(np.median(acc.unit_ratios)) if acc.unit_ratios else None
            r.lost_step = float(np.sqrt(acc.err2 / acc.int2)) if acc.int2 > 0 else None
            r.lost_at = [[rate, float(np.sqrt(e / i))] for rate, e, i in zip(RATE_GRID, acc.grid_err2, acc.grid_int2)
                         if i > 0]
            r.eps_share = acc.eps_hits / acc.eps_total if acc.eps_total else None
            out.append(r)
        return out

    def below_resolution(self) -> list[str]:
        """Tensors with a gradient whose every measured update was 0 or lost to rounding."""
        return sorted(n for n, v in self._unresolved.items() if v)
