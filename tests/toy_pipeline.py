"""A tiny pipeline for foundation tests, independent of the reference pipeline.

`ToyPipeline(change=...)` alters exactly one stage, as a code change would: "crop" shifts the crop,
"tokens" changes one code, "mask" drops one loss position, "loss" rescales the loss.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from signalchain import StepOutput, tap

SR = 8000
CARD = 16


class ToyPipeline:
    name = "toy"
    sample_rate = SR

    def __init__(self, change: str | None = None):
        self.change = change
        self.config = {"card": CARD, "change": change}

    def golden_batch(self, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        t = np.arange(SR) / SR
        freqs = rng.uniform(200, 800, size=4)
        audio = np.stack(
            [np.stack([0.3 * np.sin(2 * np.pi * f * t), 0.25 * np.sin(2 * np.pi * f * t + 0.3)]) for f in freqs]
        )
        return {"audio": torch.tensor(audio, dtype=torch.float32),
                "captions": [f"tone at {int(f)} hertz" for f in freqs],
                "metadata": [{"source_id": f"toy-{i}", "freq": float(f)} for i, f in enumerate(freqs)]}

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Embedding(CARD, 8), nn.Linear(8, CARD))

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def decode(self, tokens) -> torch.Tensor:
        tokens = torch.as_tensor(tokens)
        # each token is a frame of 100 samples at a level proportional to the code
        return (tokens.float() / CARD).repeat_interleave(100, dim=-1)

    def step(self, model: nn.Module, batch: dict, tap=tap) -> StepOutput:
        audio = tap("audio.original", batch["audio"], sample_rate=SR)
        tap("caption", batch["captions"])
        tap("metadata", batch["metadata"])
        mono = tap("audio.mono", audio.mean(dim=1, keepdim=True), sample_rate=SR)
        start = 1000 + (40 if self.change == "crop" else 0)
        bounds = torch.tensor([[start, start + 4000]] * audio.shape[0])
        tap("crop", bounds, sample_rate=SR)
        cropped = tap("audio.cropped", mono[:, :, start:start + 4000], sample_rate=SR)
        frames = cropped.reshape(cropped.shape[0], 1, -1, 100)  # [B, 1, F, 100]
        level = frames.abs().amax(-1)  # [B, 1, F]
        tokens = (level * CARD * 2).long().clamp(0, CARD - 1)
        if self.change == "tokens":
            tokens = tokens.clone()
            tokens[0, 0, 3] = (tokens[0, 0, 3] + 1) % CARD
        tap("tokens", tokens, cardinality=CARD)
        inputs, targets = tokens[..., :-1], tokens[..., 1:]
        tap("targets", targets)
        mask = torch.ones_like(targets, dtype=torch.bool)
        if self.change == "mask":
            mask[:, :, -1] = False
        tap("mask.loss", mask)
        logits = model(inputs)  # [B, 1, F-1, CARD]
        tap("logits", logits)
        ce = nn.functional.cross_entropy(logits[mask], targets[mask])
        loss = ce * (2.0 if self.change == "loss" else 1.0)
        tap("loss", loss)
        return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask)


def make(change: str | None = None) -> ToyPipeline:
    return ToyPipeline(change)
