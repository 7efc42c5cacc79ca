"""A tiny user-style pipeline with two named param groups, and a 20-step run that saves a checkpoint
after every update, with a learning-rate spike at step 13 that poisons Adam's second moments.

The story, numerically. The run's schedule spikes the `head` group's learning rate ×1000 at step 13,
but the training code applies per-group learning-rate multipliers by scaling that group's gradients
(exact for SGD, where the step is lr·g). Under Adam the update is lr·m̂/√v̂, which does not change
when g is scaled: the weights take a normal-sized step at 13. The moments absorb the spike instead:
v₁₃ = β₂v₁₂ + (1-β₂)(1000 g)² ≈ 10³g² against v₁₂ ≈ 0.013 g², i.e. the bias-corrected second moment
grows ~10⁵× (m̂ ~10²×), and stays there for ~1/(1-β₂) = 1000 steps, freezing the group once m decays.
Checkpoint 13 is the first whose `exp_avg_sq` is orders of magnitude off; loss, weights and the
golden batch's gradients stay ordinary, and the body group is untouched.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from signalchain import StepOutput

V, D, B, T = 16, 12, 4, 9
SPIKE = 1000.0


class TwoGroupPipeline:
    name = "two-groups"

    def golden_batch(self, seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        return {"tokens": torch.randint(0, V, (B, T), generator=g)}

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.ModuleDict({"body": nn.Sequential(nn.Embedding(V, D), nn.Linear(D, D), nn.Tanh()),
                              "head": nn.Linear(D, V)})

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam([{"params": model["body"].parameters(), "name": "body"},
                                 {"params": model["head"].parameters(), "name": "head"}], lr=1e-2)

    def step(self, model: nn.Module, batch: dict, tap) -> StepOutput:
        tokens = tap("tokens", batch["tokens"], cardinality=V)  # [B, T]
        inputs, targets = tokens[:, :-1], tap("targets", tokens[:, 1:])
        hidden = tap("hidden", model["body"](inputs))  # [B, T-1, D]
        logits = tap("logits", model["head"](hidden))  # [B, T-1, V]
        loss = tap("loss", F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)))
        return StepOutput(loss=loss, logits=logits, targets=targets)


def train(folder: Path, steps: int = 20, spike_at: int | None = 13, save=None, kind: str = "grad") -> list[Path]:
    """Train on fresh batches (not the golden one), saving `ckpt-{k:03d}.pt` after update k.

    kind "grad": the spike is applied as a gradient multiplier (the story above). kind "lr": the
    head group's `lr` itself is ×1000 for update `spike_at` and stored in that checkpoint (a
    scheduler that writes the next step's rate before the save): its weights jump by ~lr per value.
    """
    pipe = TwoGroupPipeline()
    model = pipe.build_model(0)
    opt = pipe.build_optimizer(model)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(steps):
        batch = pipe.golden_batch(100 + k)
        loss = pipe.step(model, batch, lambda stage, value, **meta: value).loss
        loss.backward()
        if k == spike_at and kind == "grad":  # the schedule's lr spike, applied the SGD way: as a gradient multiplier
            for q in model["head"].parameters():
                q.grad.mul_(SPIKE)
        if kind == "lr" and spike_at is not None:
            opt.param_groups[1]["lr"] = 1e-2 * (SPIKE if k == spike_at else 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if save is None:
            path = folder / f"ckpt-{k:03d}.pt"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": k}, path)
        else:
            path = save(folder, k, model, opt)
        paths.append(path)
    return paths
