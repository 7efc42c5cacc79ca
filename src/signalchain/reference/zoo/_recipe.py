"""Training recipes as real fine-tuning code writes them: an optimiser, a rate, a schedule, clipping,
gradient accumulation and bf16 autocast, applied to any of the three beds by one mixin.

A recipe is data (hashable, JSON-able); `RecipeMixin` turns it into `build_optimizer` and
`train_step` for a bed, keeping the bed's own data path, model and loss. Everything here uses
signalchain only through the public API: the recipe is the user's code, not signalchain's.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["Recipe", "RecipeMixin", "make_optimizer", "make_scheduler", "no_tap"]


def no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


@dataclass(frozen=True)
class Recipe:
    """One run's optimisation settings.

    optimizer: "adamw", "adam", "sgd" (momentum), "adafactor" (transformers', a fixed rate) or
        "adafactor-relative" (transformers' own relative step: the rate comes from the step count);
    schedule: "constant", "warmup" (linear warm-up, then constant), "warmup-cosine" (linear warm-up,
        then cosine to 0 at `total`) or "linear" (linear decay from the first step to 0 at `total`);
    clip: the max gradient norm, None for no clipping; accum: micro-batches per update;
    amp: None or "bf16" (autocast on the CPU, no scaler: bf16 has float32's range).
    """

    optimizer: str = "adamw"
    lr: float | None = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.9
    nesterov: bool = False
    schedule: str = "constant"
    warmup: int = 0
    total: int = 10_000
    clip: float | None = 1.0
    accum: int = 1
    amp: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_optimizer(recipe: Recipe, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    """The optimiser of `recipe` over `groups` (each group: params, lr, weight_decay)."""
    kind = recipe.optimizer
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, weight_decay=recipe.weight_decay)
    if kind == "adam":  # L2 weight decay folded into the gradient, as torch.optim.Adam does it
        return torch.optim.Adam(groups, lr=recipe.lr, betas=recipe.betas, weight_decay=recipe.weight_decay)
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=recipe.lr, momentum=recipe.momentum, nesterov=recipe.nesterov,
                               weight_decay=recipe.weight_decay)
    if kind in ("adafactor", "adafactor-relative"):
        from transformers.optimization import Adafactor

        if kind == "adafactor":  # the T5 fine-tuning recipe: a fixed rate, no parameter scaling
            return Adafactor(groups, lr=recipe.lr, scale_parameter=False, relative_step=False, warmup_init=False,
                             weight_decay=recipe.weight_decay)
        # transformers' documented default: the rate is min(1e-2, 1/sqrt(step)) times each tensor's RMS
        for g in groups:
            g.pop("lr", None)
        return Adafactor(groups, lr=None, scale_parameter=True, relative_step=True, warmup_init=False,
                         weight_decay=recipe.weight_decay)
    raise ValueError(f"unknown optimizer {kind!r}")


def _factor(recipe: Recipe, step: int) -> float:
    """The schedule's multiplier of the base rate at `step` (0-based)."""
    w, total = recipe.warmup, max(recipe.total, 1)
    if recipe.schedule == "constant":
        return 1.0
    if recipe.schedule == "warmup":
        return min(1.0, (step + 1) / max(w, 1))
    if recipe.schedule == "warmup-cosine":
        if step < w:
            return (step + 1) / w
        progress = min(1.0, (step - w) / max(total - w, 1))
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if recipe.schedule == "linear":  # transformers' get_linear_schedule_with_warmup, warm-up 0
        return max(0.0, (total - step) / total)
    raise ValueError(f"unknown schedule {recipe.schedule!r}")


def make_scheduler(recipe: Recipe, optimizer: torch.optim.Optimizer) -> Any:
    """A `LambdaLR` for the recipe's schedule (None for a constant rate or a relative-step Adafactor)."""
    if recipe.schedule == "constant" or recipe.optimizer == "adafactor-relative":
        return None
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _factor(recipe, s))


class RecipeMixin:
    """`build_optimizer` and `train_step` from a `Recipe`, for a bed that provides:

    - `zoo_groups(model) -> [(params, lr_scale, decays)]`: its parameter groups (the rate of a group
      is `recipe.lr * lr_scale`; `decays` False keeps biases and norms out of weight decay);
    - `micro_batches(batch, n) -> [batch]`: the batch cut into `n` parts (gradient accumulation);
    - `step(model, batch, tap)`: its forward and loss (autocast inside, where the recipe asks).
    """

    recipe: Recipe

    def _zoo_schedulers(self) -> weakref.WeakKeyDictionary:
        d = self.__dict__.get("_zoo_sched")
        if d is None:
            d = self.__dict__["_zoo_sched"] = weakref.WeakKeyDictionary()
        return d

    def zoo_groups(self, model: torch.nn.Module) -> list[tuple[list[torch.nn.Parameter], float, bool]]:
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        return [(decay, 1.0, True), (rest, 1.0, False)]

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        r = self.recipe
        groups = []
        for params, scale, decays in self.zoo_groups(model):
            if params:
                g: dict[str, Any] = {"params": params, "weight_decay": r.weight_decay if decays else 0.0}
                if r.lr is not None:
                    g["lr"] = r.lr * scale
                groups.append(g)
        opt = make_optimizer(r, groups)
        sched = make_scheduler(r, opt)
        if sched is not None:
            self._zoo_schedulers()[opt] = sched
        return opt

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.recipe.amp == "bf16" else None

    def zoo_autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.recipe.amp == "bf16" else contextlib.nullcontext()

    def micro_batches(self, batch: Any, n: int) -> list[Any]:
        return [batch]

    def train_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any,
                   tap: Any = no_tap) -> Any:
        """One update: each micro-batch's loss (weighted by its share of the batch) backward, then
        clipping (or only the norm measured), the optimiser's step, the schedule, zero_grad."""
        r = self.recipe
        model.train()
        parts = self.micro_batches(batch, r.accum) if r.accum > 1 else [batch]
        total = sum(len(p) for p in parts)
        first, loss_sum = None, 0.0
        for part in parts:
            out = self.step(model, part, tap)
            (out.loss * (len(part) / total)).backward()
            loss_sum += float(out.loss.detach()) * len(part) / total
            first = first or out
        trainable = [p for p in model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(trainable, r.clip if r.clip is not None else math.inf)
        tap("grad.norm", norm)
        optimizer.step()
        sched = self._zoo_schedulers().get(optimizer)
        if sched is not None:
            sched.step()
        optimizer.zero_grad(set_to_none=True)
        first.extras["grad_norm"] = float(norm)
        first.extras["update_loss"] = loss_sum
        return first
