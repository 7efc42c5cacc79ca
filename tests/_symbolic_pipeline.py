"""A tiny symbolic pipeline for experiment tests: REMI tokens of handmade pieces, an embedding
model, a generate that replays (or loops) the golden tokens, and decode_notes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from _symbolic import _notes_meta, clean_pieces, decode, encode, stack, token_meta, tokenizer
from signalchain import StepOutput, tap


class SymbolicToy:
    name = "symbolic-toy"

    def __init__(self, loop: bool = False, decode_notes: bool = True):
        self.tok = tokenizer()
        self.meta = token_meta(self.tok)
        self.loop = loop
        if not decode_notes:
            self.decode_notes = None  # type: ignore[assignment]

    def golden_batch(self, seed: int) -> dict[str, Any]:
        pieces = clean_pieces(seed, 3)
        ids = [encode(self.tok, p) for p in pieces]
        width = max(map(len, ids))
        tokens = np.full((len(ids), width), self.meta["pad_id"], np.int64)
        for i, x in enumerate(ids):
            tokens[i, :len(x)] = x
        return {"pieces": pieces, "tokens": torch.as_tensor(tokens), "captions": ["a piece"] * len(pieces)}

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Embedding(len(self.meta["vocab"]), 8), nn.Linear(8, len(self.meta["vocab"])))

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model: nn.Module, batch: dict[str, Any], tap=tap) -> StepOutput:
        pieces, tokens = batch["pieces"], batch["tokens"]
        tap("midi.source", stack([p[0] for p in pieces]), **_notes_meta([p[1] for p in pieces],
                                                                         [p[2] for p in pieces]))
        tap("caption", batch["captions"])
        tap("tokens", tokens, **self.meta)
        tap("notes.decoded", self.decode_notes(tokens), **_notes_meta([p[1] for p in pieces], [p[2] for p in pieces]))
        inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
        mask = targets != self.meta["pad_id"]
        targets[~mask] = -100
        tap("targets", targets)
        tap("mask.loss", mask)
        logits = tap("logits", model(inputs))
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100)
        return StepOutput(loss=tap("loss", loss), logits=logits, targets=targets, mask=mask)

    def generate(self, model: nn.Module, batch: dict[str, Any], sampling: dict[str, Any]) -> torch.Tensor:
        tokens = batch["tokens"]
        n = int(sampling.get("max_frames", tokens.shape[1]))
        if not self.loop:
            return tokens[:, :n]
        bar = self.meta["vocab"].index("Bar_None")
        rows = []
        for row in tokens.tolist():
            starts = [i for i, t in enumerate(row) if t == bar]
            one = row[starts[0]:starts[1]] if len(starts) > 1 else row
            rows.append((one * (n // len(one) + 1))[:n])
        return torch.as_tensor(rows)

    def decode_notes(self, tokens: Any) -> np.ndarray:
        rows = np.asarray(tokens)
        return stack([decode(self.tok, [int(i) for i in r if 0 <= i < len(self.meta["vocab"])], e)[0]
                      for e, r in enumerate(rows)])
