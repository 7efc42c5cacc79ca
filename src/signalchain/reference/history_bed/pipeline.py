"""The history bed's model as a signalchain `Pipeline`, so that `signalchain bisect --checkpoints` can
probe the checkpoints its HF Trainer runs saved (`signalchain history` prints the line).

    signalchain capture signalchain.reference.history_bed.pipeline:BedPipeline --out GOLDEN
"""

from __future__ import annotations

from typing import Any

import torch

from signalchain import StepOutput

from ._model import BigramLM, Chains, V

__all__ = ["BedPipeline"]


class BedPipeline:
    """Golden batch: 8 sequences of the seed's chains; the model: the bed's `BigramLM`."""

    name = "history-bed"

    def golden_batch(self, seed: int) -> torch.Tensor:
        return Chains(0).sample(8, torch.Generator().manual_seed(seed))  # [B, K, T]

    def build_model(self, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return BigramLM()

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(self, model: torch.nn.Module, batch: torch.Tensor, tap: Any) -> StepOutput:
        tap("tokens", batch, cardinality=V)
        logits = model.logits(batch)  # [B, K, T-1, V]
        targets = batch[:, :, 1:]
        tap("targets", targets)
        tap("logits", logits)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        tap("loss", loss)
        return StepOutput(loss=loss, logits=logits, targets=targets)


