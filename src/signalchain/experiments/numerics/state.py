"""Model and optimizer state: scan it for non-finite or absurd values, snapshot it, restore it.

A scan costs one reduction per tensor. A snapshot is a copy of the state dicts (and of the RNG
state), taken before an update so that the update can be replayed exactly when it goes wrong.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ...records.numerics import StateIssue, StateScan

__all__ = ["scan_state", "scan_batch", "nonfinite_tensors", "state_names", "moment_name", "Snapshot", "HUGE"]

HUGE = 1e4  # |x| beyond this in a weight or a moment is absurd for a trained network of unit-scale activations
_SQUARED = ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum", "exp_inf")  # moments that cannot be negative


def moment_name(param: str, key: str) -> str:
    """How an optimizer moment is named in findings: `heads.0.weight[exp_avg_sq]`."""
    return f"{param}[{key}]"


def _param_names(model: torch.nn.Module) -> dict[int, str]:
    return {id(q): n for n, q in model.named_parameters()}


def state_names(model: torch.nn.Module, optimizer: Any = None) -> dict[int, str]:
    """storage data_ptr -> name, for parameters, buffers and optimizer moments."""
    out = {q.untyped_storage().data_ptr(): n for n, q in model.named_parameters()}
    out.update({b.untyped_storage().data_ptr(): n for n, b in model.named_buffers()})
    if optimizer is not None:
        pn = _param_names(model)
        for q, st in optimizer.state.items():
            for key, v in st.items():
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
                    out[v.untyped_storage().data_ptr()] = moment_name(pn.get(id(q), "?"), key)
    return out


def _issue(name: str, where: str, t: torch.Tensor, squared: bool = False) -> list[StateIssue]:
    x = t.detach()
    if not x.is_floating_point() or x.numel() == 0:
        return []
    if math.isfinite(float(x.sum(dtype=torch.float32))):  # the common case: one sum and one min/max
        if (float(x.min()) >= 0) if squared else (float(x.abs().max()) <= HUGE):
            return []
    x = x.float()
    finite = torch.isfinite(x)
    out = []
    n_bad = int((~finite).sum())
    vals = x[finite]
    abs_max = float(vals.abs().max()) if vals.numel() else None
    if n_bad:
        out.append(StateIssue(name, where, "nonfinite", n_bad, x.numel(), abs_max))
    n_huge = int((vals.abs() > HUGE).sum())
    if n_huge and not squared:
        out.append(StateIssue(name, where, "huge", n_huge, x.numel(), abs_max))
    if squared:
        n_neg = int((vals < 0).sum())
        if n_neg:
            out.append(StateIssue(name, where, "negative", n_neg, x.numel(), abs_max))
    return out


def scan_state(model: torch.nn.Module, optimizer: Any = None, updates: int = 0) -> StateScan:
    """Every parameter, buffer and optimizer moment: non-finite, huge (|x| > 1e4), negative second moments."""
    issues: list[StateIssue] = []
    for n, q in model.named_parameters():
        issues += _issue(n, "parameter", q)
    for n, b in model.named_buffers():
        issues += _issue(n, "buffer", b)
    n_opt = 0
    if optimizer is not None:
        names = _param_names(model)
        for q, st in optimizer.state.items():
            for key, v in st.items():
                if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
                    n_opt += 1
                    issues += _issue(moment_name(names.get(id(q), "?"), key), "optimizer", v, key in _SQUARED)
    return StateScan(updates=updates, issues=issues, params=sum(1 for _ in model.parameters()), optimizer_tensors=n_opt)


def _leaves(batch: Any, path: str = "batch", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, value) of every tensor, array and float inside a batch (dataclasses, dicts, sequences)."""
    if depth > 4:
        return
    if isinstance(batch, (torch.Tensor, np.ndarray, float)):
        yield path, batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from _leaves(getattr(batch, f.name), f"{path}.{f.name}", depth + 1)
    elif isinstance(batch, Mapping):
        for k, v in batch.items():
            yield from _leaves(v, f"{path}[{k!r}]", depth + 1)
    elif isinstance(batch, (list, tuple)):
        for i, v in enumerate(batch[:4096]):
            yield from _leaves(v, f"{path}[{i}]", depth + 1)


def _finite(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or value.numel() == 0 or bool(torch.isfinite(value).all())
    if isinstance(value, np.ndarray):
        return value.dtype.kind != "f" or bool(np.isfinite(value).all())
    return math.isfinite(value)


def scan_batch(batch: Any) -> list[str]:
    """Paths of the floating arrays/tensors inside a batch that hold a non-finite value."""
    return [p for p, v in _leaves(batch) if not _finite(v)]


def nonfinite_tensors(batch: Any) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of the torch tensors inside a batch that hold a non-finite value."""
    return [(p, v) for p, v in _leaves(batch) if isinstance(v, torch.Tensor) and not _finite(v)]


@dataclasses.dataclass
class Snapshot:
    """Model, optimizer and scaler state plus every RNG state, as they were before an update."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    scaler: dict[str, Any] | None
    rng: tuple[Any, Any, Any]

    @classmethod
    def take(cls, model: torch.nn.Module, optimizer: Any = None, scaler: Any = None, weights: bool = True,
             rng: str = "all") -> Snapshot:
        """rng="all": Python's, NumPy's and torch's generators; "torch": torch's only (5 µs instead
        of about 200: the other two are copied as 624-word tuples and arrays)."""
        state = {k: v.detach().clone() for k, v in model.state_dict().items()} if weights else {}
        opt = copy.deepcopy(optimizer.state_dict()) if (weights and optimizer is not None) else None
        sc = scaler.state_dict() if (scaler is not None and hasattr(scaler, "state_dict")) else None
        every = rng != "torch"
        return cls(state, opt, sc, (random.getstate() if every else None, np.random.get_state() if every else None,
                                    torch.get_rng_state()))

    def restore_rng(self) -> None:
        if self.rng[0] is not None:
            random.setstate(self.rng[0])
        if self.rng[1] is not None:
            np.random.set_state(self.rng[1])
        torch.set_rng_state(self.rng[2])

    def restore(self, model: torch.nn.Module, optimizer: Any = None, scaler: Any = None) -> None:
        """Put everything back in place (the same objects: patched methods and hooks survive)."""
        if self.model:
            with torch.no_grad():
                model.load_state_dict(self.model)
        if optimizer is not None and self.optimizer is not None:
            optimizer.load_state_dict(copy.deepcopy(self.optimizer))
        if scaler is not None and self.scaler:
            scaler.load_state_dict(self.scaler)
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        self.restore_rng()
