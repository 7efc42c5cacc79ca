"""NaN and infinite values: the method's ten causes, each where a real pipeline meets it.

The expected stage is the first tap whose value is non-finite ("optimizer" or "model" when the
state itself is corrupted). Every fault here goes non-finite on the golden batch of seed 0, at the
first step (the optimiser faults: right after the first update). Two depend on the batch, as the
real bugs do: `cross_attention_no_null_slot` needs a caption dropped by classifier-free dropout
(seeds 0, 1 and 3 of the default golden batch have one; 2 and 4 do not), and the NaN audio of the
two input faults makes the codec refuse the batch once it reaches the crop.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..model import CrossAttention, MusicLM
    from ..pipeline import Batch, ReferencePipeline

SECTION = "NaN and infinite values"


def _wrap_encode_condition(p: ReferencePipeline, post: object) -> None:
    """Make `build_model` return models whose condition embedding goes through `post(model, cond)`."""
    def patch(model: MusicLM) -> None:
        encode = model.encode_condition

        def encode_condition(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
            cond, cond_mask = encode(ids, mask)
            return post(model, cond), cond_mask  # type: ignore[operator]

        model.encode_condition = encode_condition  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 1. division by zero ---------------------------------------------------------------------------

@fault("silent_clip_std_division", "nonfinite", "division by zero", SECTION,
       ["nonfinite.first"], "audio.mono", symptom="nan")
def _silent_clip_std_division(p: ReferencePipeline) -> None:
    load_clips = p.load_clips

    def load(batch: Batch) -> list[np.ndarray]:
        clips = load_clips(batch)
        # The data: one file of the collection is digital silence (a failed export). Harmless by
        # itself; the clean pipeline trains on it without trouble.
        if len(clips) > 1:
            clips[1] = np.zeros_like(clips[1])
        return clips

    def normalize(audio: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        # Bug: each clip is standardised by its own standard deviation, which is 0 for a silent
        # clip: 0 / 0 = NaN for every sample of it (numpy only warns; the warning is hidden here).
        std = np.array([audio[i, :, : max(int(n), 1)].std() for i, n in enumerate(lengths)], dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return audio / std[:, None, None]

    p.load_clips = load  # type: ignore[method-assign]
    p.normalize = normalize  # type: ignore[method-assign]


# ---- 2. logarithm of zero --------------------------------------------------------------------------

@fault("kl_soft_targets_log_zero", "nonfinite", "logarithm of zero", SECTION,
       ["nonfinite.loss", "nonfinite.first"], "loss", symptom="nan")
def _kl_soft_targets_log_zero(p: ReferencePipeline) -> None:
    smoothing = 0.0  # label smoothing, switched off for this run

    def compute_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # Bug: label smoothing written as a KL divergence to soft targets with a plain
        # `q * (q.log() - log_p)`. With smoothing 0 the soft targets hold zeros and 0 * log(0)
        # = 0 * -inf = NaN (`torch.xlogy` or `F.kl_div` would define it as 0).
        card = logits.shape[-1]
        log_p = F.log_softmax(logits.float(), dim=-1)
        q = F.one_hot(targets, card).float() * (1 - smoothing) + smoothing / card
        kl = (q * (q.log() - log_p)).sum(-1) * mask  # [B, K, T]
        per_codebook = kl.sum(dim=(0, 2)) / mask.sum(dim=(0, 2)).clamp(min=1)
        return kl.sum() / mask.sum().clamp(min=1), per_codebook

    p.compute_loss = compute_loss  # type: ignore[method-assign]


# ---- 3. invalid normalisation statistics -----------------------------------------------------------

@fault("cond_layernorm_eps_zero", "nonfinite", "invalid normalisation statistics", SECTION,
       ["nonfinite.first"], "condition.embedding", symptom="nan")
def _cond_layernorm_eps_zero(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        # Bug: a LayerNorm on the conditioner's output, with eps=0 "to match the reference
        # numerics". Masked and dropped condition slots are all-zero vectors: variance 0,
        # so (x - mean) / sqrt(0 + 0) = 0 / 0.
        model.cond_norm = nn.LayerNorm(model.config.dim, eps=0.0)

    patch_model(p, patch)
    _wrap_encode_condition(p, lambda model, cond: model.cond_norm(cond))


# ---- 4. exponential overflow -----------------------------------------------------------------------

@fault("logit_scale_raw_init", "nonfinite", "exponential overflow", SECTION,
       ["nonfinite.first"], "logits", symptom="nan")
def _logit_scale_raw_init(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        # Bug: a learnable logit scale kept in log space (as CLIP does) is initialised with the
        # scale itself, 100, instead of log(100): exp(100) overflows float32 (max ~ exp(88.7)).
        model.logit_log_scale = nn.Parameter(torch.tensor(100.0))
        predict = model.compute_predictions

        def compute_predictions(codes: Tensor, cond: Tensor, cond_mask: Tensor) -> tuple[Tensor, Tensor]:
            logits, mask = predict(codes, cond, cond_mask)
            return logits * model.logit_log_scale.exp(), mask

        model.compute_predictions = compute_predictions  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 5. very large updates -------------------------------------------------------------------------

@fault("adam_eps_zero", "nonfinite", "very large (unbounded) updates", SECTION,
       ["nonfinite.state"], "optimizer", symptom="nan")
def _adam_eps_zero(p: ReferencePipeline) -> None:
    build_optimizer = p.build_optimizer

    def build(model: MusicLM) -> torch.optim.Optimizer:
        opt = build_optimizer(model)
        # Bug: Adam's eps set to 0 "so that it does not bias the update". The update
        # m / (sqrt(v) + eps) is then unbounded: a weight whose gradient is exactly 0 (an unused
        # embedding row or position) gets 0 / 0 = NaN at the first step.
        for group in opt.param_groups:
            group["eps"] = 0.0
        return opt

    p.build_optimizer = build  # type: ignore[method-assign]


# ---- 6. unstable lower-precision operations ------------------------------------------------------

@fault("fp16_norm_eps_underflow", "nonfinite", "an unstable lower-precision operation", SECTION,
       ["nonfinite.first"], "condition.embedding", symptom="nan")
def _fp16_norm_eps_underflow(p: ReferencePipeline) -> None:
    p.cfg.amp = "fp16"  # the run trains in float16 with a GradScaler

    def l2_normalise(model: MusicLM, cond: Tensor) -> Tensor:
        # Bug: the condition is cast to the dtype the model computes in (float16 here) and
        # L2-normalised with eps=1e-8, which rounds to 0 in float16 (smallest subnormal 6e-8):
        # for the all-zero masked slots the division is 0 / 0. In float32 the same code is safe.
        if torch.is_autocast_enabled("cpu"):
            cond = cond.to(torch.get_autocast_dtype("cpu"))
        return cond / (cond.pow(2).sum(-1, keepdim=True).sqrt() + 1e-8)

    _wrap_encode_condition(p, l2_normalise)


# ---- 7. non-finite input audio -------------------------------------------------------------------

@fault("nan_sample_in_clip", "nonfinite", "non-finite input audio", SECTION,
       ["nonfinite.input"], "audio.original", symptom="nan")
def _nan_sample_in_clip(p: ReferencePipeline) -> None:
    load_clips = p.load_clips

    def load(batch: Batch) -> list[np.ndarray]:
        clips = load_clips(batch)
        # Bug: a float WAV with a corrupt block decodes to NaN samples, and nothing checks the
        # decoded audio: one NaN in one clip flows through resampling into the codec.
        i = min(2, len(clips) - 1)
        bad = clips[i].copy()
        bad[:, bad.shape[-1] // 3] = np.nan
        clips[i] = bad
        return clips

    p.load_clips = load  # type: ignore[method-assign]


# ---- 8. empty reductions -------------------------------------------------------------------------

@fault("per_codebook_mean_empty", "nonfinite", "an empty reduction", SECTION,
       ["nonfinite.loss", "nonfinite.first"], "loss", symptom="nan")
def _per_codebook_mean_empty(p: ReferencePipeline) -> None:
    loss_mask = p.loss_mask
    active = 2  # a coarse-to-fine curriculum: train the first two codebooks first

    def curriculum_mask(padding: Tensor, pattern_mask: Tensor) -> Tensor:
        mask = loss_mask(padding, pattern_mask).clone()
        mask[:, active:] = False  # legitimate: codebooks >= 2 are not trained yet
        return mask

    def compute_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        ce = F.cross_entropy(logits.flatten(0, 2).float(), targets.flatten(), reduction="none").view_as(targets)
        # Bug: each codebook's loss is `.mean()` over its selected positions: the mean of an
        # empty selection is NaN (0 / 0), and the total averages the per-codebook values.
        per_codebook = torch.stack([ce[:, k][mask[:, k]].mean() for k in range(ce.shape[1])])
        return per_codebook.mean(), per_codebook

    p.loss_mask = curriculum_mask  # type: ignore[method-assign]
    p.compute_loss = compute_loss  # type: ignore[method-assign]


# ---- 9. invalid masks ----------------------------------------------------------------------------

def _manual_cross_attention(attn: CrossAttention, x: Tensor, cond: Tensor, cond_mask: Tensor) -> Tensor:
    """The hand-written attention of a port: masked_fill(-inf), then softmax. x [B, S, D]."""
    B, S, D = x.shape
    L, H = cond.shape[1], attn.heads
    q = attn.q(x).view(B, S, H, D // H).transpose(1, 2)  # [B, H, S, Dh]
    k, v = attn.kv(cond).view(B, L, 2, H, D // H).permute(2, 0, 3, 1, 4)  # [B, H, L, Dh]
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)  # [B, H, S, L]
    scores = scores.masked_fill(~cond_mask[:, None, None, :], float("-inf"))
    y = scores.softmax(dim=-1) @ v  # a row with no valid key: softmax of all -inf = NaN
    return attn.out(y.transpose(1, 2).reshape(B, S, D))


@fault("cross_attention_no_null_slot", "nonfinite", "an invalid (all-masked) attention mask", SECTION,
       ["nonfinite.first"], "logits", symptom="nan")
def _cross_attention_no_null_slot(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        # Bug: a port of the model to a hand-written attention drops the always-valid null slot
        # ("the condition always has words"). A caption removed by classifier-free dropout has
        # an all-False mask row: its softmax runs over nothing and every logit of it is NaN.
        model.add_null_slot = lambda cond, cond_mask: (cond, cond_mask.bool())  # type: ignore[method-assign]
        for block in model.blocks:
            attn = block.cross_attn
            attn.forward = lambda x, c, m, attn=attn: _manual_cross_attention(attn, x, c, m)  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 10. corrupted model or optimiser state ------------------------------------------------------

@fault("nan_weight_from_checkpoint", "nonfinite", "corrupted model state", SECTION,
       ["nonfinite.state"], "model", symptom="nan")
def _nan_weight_from_checkpoint(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        # Bug: the weights come from a checkpoint written after an overflow had put a NaN into
        # one weight of the first MLP, and it is loaded without a finiteness check.
        with torch.no_grad():
            model.blocks[0].mlp[0].weight[7, 3] = float("nan")

    patch_model(p, patch)


@fault("nan_adam_state_resumed", "nonfinite", "corrupted optimiser state", SECTION,
       ["nonfinite.optimizer_state"], "optimizer", symptom="nan")
def _nan_adam_state_resumed(p: ReferencePipeline) -> None:
    build_optimizer = p.build_optimizer

    def build(model: MusicLM) -> torch.optim.Optimizer:
        opt = build_optimizer(model)
        # Bug: the optimiser is resumed from a checkpoint whose Adam second moment holds a NaN
        # (saved mid-overflow). The weights load clean; the first update writes the NaN into them.
        weight = model.heads[0].weight
        exp_avg_sq = torch.full_like(weight, 1e-6)
        exp_avg_sq[3, 5] = float("nan")
        opt.state[weight] = {"step": torch.tensor(50.0), "exp_avg": torch.zeros_like(weight),
                             "exp_avg_sq": exp_avg_sq}
        return opt

    p.build_optimizer = build  # type: ignore[method-assign]
