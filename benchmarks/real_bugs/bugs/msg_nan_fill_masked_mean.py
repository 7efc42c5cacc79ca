"""AudioCraft's `compute_predictions` fills the invalid steps of the delay pattern with NaN; a loss
reduced over every position (then multiplied by the mask) is NaN on every step.

facebookresearch/audiocraft#81: a user calling `lm.compute_predictions` on their own codes sees
NaN in `lm_output.logits` and asks how it is meant to be used. The logits are NaN by design where
`lm_output.mask` is False (the steps the delay pattern never filled); AudioCraft's own solver keeps
only `logits[mask]` before the cross-entropy. The user's loop here takes the per-position
cross-entropy of *all* positions and zeroes the invalid ones by multiplying with the mask: NaN * 0
is NaN, so the loss is NaN from the first step. The fix: select `logits[mask]`, `targets[mask]`.

What the message should say (class "messages"): not "the first non-finite value appears at
`logits`" (the user then hunts an overflow in the model, and the NaN there is by design), but "the
loss reduces over positions the loss mask excludes: `mask.loss` is False at every non-finite
logit, and the loss is finite when computed on `logits[mask]` only; select before the reduction
(`ce[mask].mean()` or `logits[mask]`), multiplying by the mask does not remove a NaN".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="msg_nan_fill_masked_mean", thread="https://github.com/facebookresearch/audiocraft/issues/81",
    library="audiocraft", idiom="own loop over an AudioCraft-style LM (compute_predictions + mask)",
    cls="messages",
    cause="the cross-entropy is taken over every position and multiplied by the mask: NaN logits the "
          "pattern leaves at masked steps (by design) give NaN * 0 = NaN",
    fix="select the valid positions before the loss (logits[mask], targets[mask])",
    stages=("loss", "mask.loss"), cause_ids=("nonfinite.loss", "loss.masked_nonfinite"),
    symptom="nan")


class AudiocraftStyle(ReferencePipeline):
    """The LM returns NaN logits where its mask is False, as AudioCraft's `compute_predictions` does."""

    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def build_model(self, seed: int):
        model = super().build_model(seed)
        inner = model.compute_predictions

        def compute_predictions(codes, cond, cond_mask):
            logits, mask = inner(codes, cond, cond_mask)
            # AudioCraft's pattern keeps only the valid steps (a sequence of T steps): codebook k has no
            # step for its last k frames, and reverting with special_token=NaN leaves NaN logits there.
            K, T = codes.shape[1], codes.shape[2]
            frame = torch.arange(T, device=codes.device)
            had_step = frame[None, :] < (T - torch.arange(K, device=codes.device))[:, None]  # [K, T]
            mask = mask & had_step[None]
            return logits.masked_fill(~mask[..., None], float("nan")), mask

        model.compute_predictions = compute_predictions
        return model

    def compute_loss(self, logits, targets, mask):
        K = targets.shape[1]
        if self.fixed:  # AudioCraft's solver: keep only the valid steps, per codebook
            per = torch.stack([F.cross_entropy(logits[:, k][mask[:, k]].float(), targets[:, k][mask[:, k]])
                               for k in range(K)])
            return per.mean(), per
        # the user's loop: per-position loss everywhere, then "mask out" the invalid steps
        ce = F.cross_entropy(logits.flatten(0, 2).float(), targets.flatten(), reduction="none").view_as(targets)
        ce = ce * mask
        per = ce.sum(dim=(0, 2)) / mask.sum(dim=(0, 2)).clamp(min=1)
        return ce.sum() / mask.sum().clamp(min=1), per


def pipeline(fixed: bool) -> AudiocraftStyle:
    return AudiocraftStyle(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    model = p.build_model(0)
    out = p.step(model, p.golden_batch(0))
    logits, mask = out.logits, out.mask
    nan_in_mask = bool(torch.isnan(logits[mask]).any())
    nan_outside = float(torch.isnan(logits[~mask]).float().mean()) if (~mask).any() else 0.0
    loss = float(out.loss.detach())
    return (not torch.isfinite(out.loss).item()) and not nan_in_mask, (
        f"loss {loss:.4g}; NaN logits: {100 * nan_outside:.0f}% of the masked-out positions, "
        f"{'some' if nan_in_mask else 'none'} of the counted ones")
