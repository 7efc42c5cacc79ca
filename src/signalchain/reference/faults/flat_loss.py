"""Loss does not decrease: the ten causes of a flat loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import ReferencePipeline


# ---- flat loss: the loss cannot fall ----------------------------------------------------------------

@fault("mask_all_padding", "flat_loss", "the valid loss mask is empty", "Loss does not decrease",
       ["mask.empty"], "mask.padding", symptom="flat-loss")
def _mask_all_padding(p: ReferencePipeline) -> None:
    def padding_mask(valid: np.ndarray, frames: int) -> torch.Tensor:
        # Bug: the comparison is inverted (frame >= length), so every real frame counts as padding.
        n_valid = np.ceil(valid / p.codec.hop).astype(np.int64)
        mask = np.arange(frames)[None, :] >= np.maximum(n_valid[:, None], frames)
        return torch.from_numpy(mask)

    p.padding_mask = padding_mask  # type: ignore[method-assign]


@fault("loss_from_targets", "flat_loss", "the model output does not influence the selected loss",
       "Loss does not decrease", ["loss.independent_of_output"], "loss", symptom="flat-loss")
def _loss_from_targets(p: ReferencePipeline) -> None:
    def compute_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: a refactor computes the loss from a one-hot of the targets instead of the logits
        # (two variables swapped). backward() then complained that the loss needs no gradient, and
        # someone "fixed" that with requires_grad_(): the loss is now a constant cut off from the model.
        onehot = torch.nn.functional.one_hot(targets, logits.shape[-1]).float() * 10.0
        ce = torch.nn.functional.cross_entropy(onehot.flatten(0, 2), targets.flatten(), reduction="none")
        ce = ce.view_as(targets) * mask
        per = ce.sum(dim=(0, 2)) / mask.sum(dim=(0, 2)).clamp(min=1)
        loss = ce.sum() / mask.sum().clamp(min=1)
        return loss.requires_grad_(True), per

    p.compute_loss = compute_loss  # type: ignore[method-assign]
