"""Labels shifted in the dataset and shifted again by the loss: the model is trained to predict token t + 2.

wdndev/tiny-llm-zh#10: the pre-training dataset's `__getitem__` built `X = sample[:-1]` and
`Y = sample[1:]` (labels already shifted), and the causal LM's forward shifted them once more
(`shift_logits = logits[..., :-1, :]`, `shift_labels = labels[..., 1:]`), so position t was trained
on token t + 2; the maintainer confirmed ("确实，真的有点重复了，出现大问题了") and fixed the dataset: the
labels are a copy of the input ids, the model does the shift. (HF's causal LMs shift internally too,
huggingface/transformers#44642.) Reproduced on the symbolic bed (miditok REMI, BOS + ids + EOS): the
user's collator pre-shifts the labels and the bed's next-token loss shifts them again.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference.symbolic import SymbolicBedPipeline
from signalchain.reference.symbolic.model import IGNORE

BUG = RealBug(
    name="data_labels_shifted_twice", thread="https://github.com/wdndev/tiny-llm-zh/issues/10",
    library="own causal LM (HF-style shift in forward) + miditok", idiom="symbolic REMI LM, dataset returns "
    "labels = ids[1:], the loss shifts again", cls="data-semantics",
    cause="the dataset already shifts the labels (Y = sample[1:]) and the loss shifts them again: position t is "
          "trained to predict token t + 2",
    fix="labels = input_ids (unshifted); let the model's loss do the one shift",
    stages=("targets",), cause_ids=("targets.misaligned",), symptom="flat-loss")


class PreShifted(SymbolicBedPipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.name = "symbolic-labels-shifted-twice"

    def targets_from(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            return super().targets_from(ids, padding)  # labels = ids, one shift (in the loss)
        labels = ids.masked_fill(~padding, IGNORE)
        labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE)], dim=1)  # dataset: Y = sample[1:]
        targets = torch.full_like(labels, IGNORE)
        targets[:, :-1] = labels[:, 1:]  # the loss: shift_labels = labels[..., 1:]
        return targets


def pipeline(fixed: bool) -> PreShifted:
    return PreShifted(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """On the golden batch: how often the target at t is the next token ids[t + 1] (and how often ids[t + 2])."""
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    ids, padding = p.prepare(batch, lambda s, v, **m: v)
    targets = p.targets_from(ids, padding)
    t = targets[:, :-2]
    kept = t != IGNORE
    next1 = float((t == ids[:, 1:-1])[kept].float().mean())
    next2 = float((t == ids[:, 2:])[kept].float().mean())
    return next1 < 0.5, (f"targets equal the next token ids[t+1] at {next1:.0%} of {int(kept.sum())} labelled "
                         f"positions, the token after it ids[t+2] at {next2:.0%}")
