"""`pad_token_id == eos_token_id` and labels masked by value: every EOS leaves the loss, the model never stops.

huggingface/trl#976: with `tokenizer.pad_token = tokenizer.eos_token` (the usual move when a model has no
pad token), the collator sets the label of every pad token to -100; since pad and EOS share an id,
every real EOS is masked too and the fine-tuned model rarely if ever generates its stop token. The
fix: keep the EOS labels (mask padding by position, or give padding its own id). Reproduced on the
symbolic bed (miditok REMI, BOS + ids + EOS): the user's collate pads with the EOS id and builds
the labels by masking the pad id's value.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from real_bugs.bed import RealBug
from signalchain.reference.symbolic import SymbolicBedPipeline
from signalchain.reference.symbolic import tokenizer as tk
from signalchain.reference.symbolic.model import IGNORE

BUG = RealBug(
    name="declared_pad_is_eos_masks_eos", thread="https://github.com/huggingface/trl/issues/976",
    library="miditok + HF-style collator", idiom="symbolic REMI LM, pad_token = eos_token, labels[labels == pad] = -100",
    cls="declared-vs-done",
    cause="pad id set to the EOS id and labels masked by value: every genuine EOS target is out of the loss",
    fix="mask padding by position (or give padding its own id) so each sequence's EOS stays a target",
    stages=("mask.loss", "targets"), cause_ids=("mask.eos_excluded", "targets.eos_masked"), symptom="repetitive", fast=True)


class PadIsEos(SymbolicBedPipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.name = "symbolic-pad-is-eos"
        _, _, eos = tk.special_ids(self.tokenizer)
        self.pad_token_id = eos  # "the tokenizer has a pad token, but we follow the GPT-2 recipe"

    def collate(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(seqs), T, dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
            mask[i, : len(s)] = True
        return ids, mask

    def targets_from(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            return super().targets_from(ids, padding)  # padding masked by position
        targets = torch.full_like(ids, IGNORE)
        targets[:, :-1] = ids[:, 1:]
        return targets.masked_fill(targets == self.pad_token_id, IGNORE)  # the collator's rule


def pipeline(fixed: bool) -> PadIsEos:
    return PadIsEos(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """How many EOS targets does the loss keep on the golden batch (one EOS per sequence)?"""
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    ids, padding = p.prepare(batch, lambda s, v, **m: v)
    targets = p.targets_from(ids, padding)
    _, _, eos = tk.special_ids(p.tokenizer)
    kept = int((targets == eos).sum())
    return kept == 0, f"EOS targets in the loss: {kept} of {len(batch)} sequences' EOS"
