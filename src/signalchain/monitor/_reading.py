"""What the Monitor can see of a step, read without trusting it.

The Monitor's verdict must survive whatever the loop hands it: an unreduced loss (`reduction="none"`,
[B] or [B, T]), a float, a dict, None, an optimizer or a scaler that is only duck-typed. These
readers never raise; what they cannot read they say so, and the Monitor judges the step on the
values it can still see (fail closed: a non-finite value anywhere means "skip the update").
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from .._tensor import as_float

__all__ = ["LossReading", "read_loss", "nonfinite_names", "scaler_guards", "reduced", "safely", "visible"]


@dataclasses.dataclass(slots=True)
class LossReading:
    """The step's loss as the Monitor read it.

    value: one number for the history (the mean of an unreduced loss; NaN/inf when an element is);
    finite: every element finite (None: the loss could not be read); elements: how many values;
    reason: why it could not be read.
    """

    value: float
    finite: bool | None
    elements: int = 1
    nonfinite: int = 0
    reason: str | None = None


def _unwrap(loss: Any) -> Any:
    """The loss inside a StepOutput, a mapping with a 'loss' key or an HF ModelOutput."""
    if isinstance(loss, (torch.Tensor, np.ndarray, numbers.Number, str, bytes)) or loss is None:
        return loss
    if isinstance(loss, Mapping):
        return loss["loss"] if "loss" in loss else loss
    inner = getattr(loss, "loss", None)
    return inner if isinstance(inner, (torch.Tensor, numbers.Number, np.ndarray)) else loss


def _unreadable(loss: Any, why: str) -> LossReading:
    return LossReading(float("nan"), None, 0, 0, f"the loss passed to check() is {why} ({type(loss).__name__})")


def read_loss(loss: Any) -> LossReading:
    """Judge a loss on all of its elements: any NaN or inf element makes the step non-finite."""
    try:
        if isinstance(loss, torch.Tensor) and loss.is_floating_point() and loss.numel() == 1:
            v = as_float(loss)  # the usual reduced loss: one device read, nothing more
            return LossReading(v, True) if math.isfinite(v) else LossReading(v, False, 1, 1)
        value = _unwrap(loss)
        if value is None:
            return _unreadable(loss, "None")
        if isinstance(value, bool) or isinstance(value, (str, bytes)):
            return _unreadable(loss, "not a number")
        if isinstance(value, numbers.Real):
            v = float(value)
            return LossReading(v, math.isfinite(v), 1, 0 if math.isfinite(v) else 1)
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            value = torch.from_numpy(np.asarray(value))
        if not isinstance(value, torch.Tensor):
            return _unreadable(loss, "neither a tensor nor a number")
        t = value.detach()
        if t.numel() == 0:
            return _unreadable(loss, "an empty tensor")
        if t.dtype == torch.bool:
            return _unreadable(loss, "a boolean tensor")
        if not (t.is_floating_point() or t.is_complex()):  # integers are always finite
            return LossReading(float(t.double().mean()), True, t.numel())
        if t.numel() == 1 and t.is_complex():
            finite = bool(torch.isfinite(t).all())
            return LossReading(complex(t.reshape(())).real, finite, 1, 0 if finite else 1)
        finite = bool(torch.isfinite(t).all())  # an unreduced loss: every element counts
        real = t.real if t.is_complex() else t
        if finite:
            return LossReading(float(real.double().mean()), True, t.numel())
        bad = ~torch.isfinite(t.reshape(-1))
        return LossReading(_first_bad(real, bad), False, t.numel(), int(bad.sum()))
    except Exception as exc:  # an object whose conversion itself raises
        return _unreadable(loss, f"unreadable: {type(exc).__name__}: {exc}")


def _first_bad(t: torch.Tensor, bad: torch.Tensor) -> float:
    """The history's value for a non-finite unreduced loss: its first non-finite element (NaN or ±inf)."""
    where = bad.nonzero()
    return float(t.reshape(-1)[int(where[0])]) if len(where) else float("nan")


def nonfinite_names(named: Iterable[tuple[str, torch.Tensor | None]], limit: int = 64) -> tuple[list[str], list[str]]:
    """(names holding a NaN or inf, names that could not be read), one plain check per tensor.

    Deliberately independent of the fused norm the fast path uses: this is the path taken when
    that one failed.
    """
    bad: list[str] = []
    unread: list[str] = []
    for name, t in named:
        if t is None:
            continue
        try:
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t.detach()).all()):
                bad.append(name)
        except Exception:
            unread.append(name)
        if len(bad) >= limit:
            break
    return bad, unread


_GRAD_SCALERS = tuple(c for c in (getattr(torch.amp, "GradScaler", None),) if c is not None)


def scaler_guards(scaler: Any) -> bool:
    """Does this scaler itself refuse a non-finite gradient (so the Monitor may leave it the overflow)?

    Only torch's own, enabled `GradScaler` with its own `step` does: it checks the unscaled
    gradients and skips the update. A duck-typed object, a disabled scaler (its `step` is a plain
    `optimizer.step()`) or a subclass with another `step` is not trusted with a NaN.
    """
    if scaler is None or not _GRAD_SCALERS:
        return False
    try:
        return (isinstance(scaler, _GRAD_SCALERS) and bool(scaler.is_enabled())
                and any(type(scaler).step is c.step for c in _GRAD_SCALERS))
    except Exception:
        return False


def reduced(value: Any) -> Any:
    """A replay's output with an unreduced loss made scalar (its mean), so the replay can backward it.

    The mean keeps every non-finite element visible (one NaN element makes the mean NaN).
    """
    def scalar(loss: Any) -> Any:
        if isinstance(loss, torch.Tensor) and loss.dim() > 0 and loss.numel() > 1 and loss.is_floating_point():
            return loss.mean()
        return loss

    if isinstance(value, torch.Tensor):
        return scalar(value)
    if isinstance(value, Mapping) and "loss" in value:
        return {**value, "loss": scalar(value["loss"])}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "loss"):
        try:
            return dataclasses.replace(value, loss=scalar(value.loss))
        except Exception:
            return value
    return value


def safely(fn: Callable[..., Any], arg: Any, default: Any = False) -> Any:
    """fn(arg), or `default` if that raises."""
    try:
        return fn(arg)
    except Exception:
        return default


def visible(loss: Any, model: torch.nn.Module) -> tuple[bool | None, list[str] | None, list[str] | None]:
    """(loss finite?, names of non-finite gradients, of non-finite parameters); None where unreadable.

    Plain torch calls only, none of the helpers the fast path uses: this runs when one of them failed.
    """
    def finite(t: Any) -> bool | None:
        if isinstance(t, torch.Tensor) and t.numel() and t.dtype != torch.bool:
            return bool(torch.isfinite(t.detach()).all())  # integers: always True
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            return math.isfinite(t)
        return None

    loss_ok = safely(finite, loss["loss"] if isinstance(loss, dict) and "loss" in loss else loss, None)
    try:
        named = list(model.named_parameters())
    except Exception:
        return loss_ok, None, None
    grads = [n for n, q in named if q.grad is not None and safely(finite, q.grad, True) is False]
    weights = [n for n, q in named if safely(finite, q, True) is False]
    return loss_ok, grads, weights
