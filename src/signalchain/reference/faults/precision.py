"""Mixed-precision failures: a scaler that skips steps, a collapsing scale, overflow, mismatch.

With `amp="fp16"` the reference trains under CPU autocast in float16 with a
`torch.amp.GradScaler("cpu")`: the loss is scaled before backward, the gradients are unscaled
and checked, and a step with a non-finite gradient is skipped and the scale halved. With
`amp="bf16"` it autocasts to bfloat16 without a scaler. Each fault sets the precision the run uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..model import MusicLM
    from ..pipeline import ReferencePipeline

SECTION = "Mixed-precision failures"


@fault("scaler_init_scale_huge", "precision", "the gradient scaler skips (nearly) every step", SECTION,
       ["amp.steps_skipped"], "optimizer", symptom="flat-loss")
def _scaler_init_scale_huge(p: ReferencePipeline) -> None:
    p.cfg.amp = "fp16"
    build_optimizer = p.build_optimizer

    def build(model: MusicLM) -> torch.optim.Optimizer:
        opt = build_optimizer(model)
        # Bug: the scaler is built "to start high and grow fast": init_scale=2**40 and
        # growth_interval=1. The scaled float16 gradients overflow, the step is skipped and the
        # scale halved, one step at a time from 2**40; once a step gets through, the scale doubles
        # straight back into overflow. The loss barely moves and nothing reports an error.
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40, growth_interval=1)
        p._scalers[opt] = p._last_scaler = scaler
        return opt

    p.build_optimizer = build  # type: ignore[method-assign]


@fault("scale_collapse_nan_grad", "precision", "the loss scale collapses towards zero", SECTION,
       ["amp.scale_collapse", "amp.steps_skipped"], "optimizer", symptom="flat-loss")
def _scale_collapse_nan_grad(p: ReferencePipeline) -> None:
    p.cfg.amp = "fp16"
    def patch(model: MusicLM) -> None:
        encode = model.encode_condition

        def encode_condition(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
            cond, cond_mask = encode(ids, mask)
            # Bug: a hand-written RMS normalisation of the condition, eps added *outside* the
            # sqrt. The forward is fine (0 / eps = 0 on the all-zero masked slots), but the
            # derivative of sqrt at 0 is inf, and inf * 0 = NaN in every backward. The scaler
            # sees a non-finite gradient on every step: it skips them all and halves the scale
            # each time, down towards 0, without a single error.
            rms = cond.pow(2).mean(-1, keepdim=True).sqrt()
            return cond / (rms + 1e-6), cond_mask

        model.encode_condition = encode_condition  # type: ignore[method-assign]

    patch_model(p, patch)


@fault("fp16_zloss_sum_overflow", "precision", "a float16 operation overflows in the forward", SECTION,
       ["amp.overflow", "nonfinite.loss"], "loss", symptom="nan")
def _fp16_zloss_sum_overflow(p: ReferencePipeline) -> None:
    p.cfg.amp = "fp16"
    compute_loss = p.compute_loss
    z_weight = 1e-4  # PaLM's z-loss keeps the softmax normaliser near 1

    def compute_loss_with_z(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        loss, per_codebook = compute_loss(logits, targets, mask)
        # Bug: the auxiliary z-loss is summed in the logits' dtype (float16 under autocast) and
        # normalised afterwards: log Z ~ ln(256) = 5.5 per position, squared ~30, and a batch of
        # 8 x 4 x 100 positions sums to ~96 000 > 65 504, the float16 maximum: inf.
        z_sum = (logits.logsumexp(dim=-1).pow(2) * mask).sum()
        return loss + z_weight * z_sum.float() / mask.sum().clamp(min=1), per_codebook

    p.compute_loss = compute_loss_with_z  # type: ignore[method-assign]


@fault("bf16_running_mean_loss", "precision", "the low-precision loss differs from full precision",
       SECTION, ["amp.precision_mismatch"], "loss", symptom="unstable")
def _bf16_running_mean_loss(p: ReferencePipeline) -> None:
    p.cfg.amp = "bf16"

    def compute_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # Bug: the masked mean is accumulated codebook by codebook and frame by frame (a loop
        # written to plot the loss against position, then reused as the objective) in an
        # accumulator of the logits' dtype. Under bfloat16 autocast each small increment
        # (~loss / (K * T)) is rounded to the accumulator's 8-bit mantissa: rounded up at first,
        # then to nothing once the sum reaches 4. The loss is off by 10-30 % against float32.
        ce = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none").view_as(targets)
        ce = ce * mask  # [B, K, T], logits' dtype
        count = mask.sum().clamp(min=1)
        per_count = mask.sum(dim=(0, 2)).clamp(min=1)  # [K]
        loss = torch.zeros((), dtype=logits.dtype)
        per_codebook = []
        for k in range(ce.shape[1]):
            running = torch.zeros((), dtype=logits.dtype)
            for t in range(ce.shape[2]):
                frame = ce[:, k, t].sum()
                loss = loss + frame / count
                running = running + frame / per_count[k]
            per_codebook.append(running)
        return loss, torch.stack(per_codebook)

    p.compute_loss = compute_loss  # type: ignore[method-assign]
