"""Zoo members on the reference bed (`signalchain.reference`): recipes, tap conventions and a
pretrained start, each written as a user's AudioCraft-style solver would be."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from signalchain import StepOutput
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.pattern import build_delay_pattern, pattern_valid_mask, revert_delay_pattern
from signalchain.reference.pipeline import Batch

from ._lora import add_lora, freeze
from ._member import member
from ._recipe import Recipe, RecipeMixin, no_tap
from .pretrained import PretrainSpec, pretrained_state

__all__ = ["RefMember", "REF_PRETRAIN"]

#: The reference bed pre-trained with its own recipe (AdamW 2e-3, warm-up 10, clip 1).
REF_PRETRAIN_STEPS = 300


def _bed() -> ReferencePipeline:
    return ReferencePipeline(RefConfig())


REF_PRETRAIN = PretrainSpec("reference", _bed, RefConfig().to_dict(), REF_PRETRAIN_STEPS)


class RefMember(RecipeMixin, ReferencePipeline):
    """The reference bed with a recipe, an optional pretrained start, LoRA or a frozen text encoder,
    and one of several tap conventions for what the model reads and what the loss compares."""

    def __init__(self, name: str, cfg: RefConfig, recipe: Recipe, *, pretrained: bool = False,
                 lora: bool = False, freeze_text: bool = False, taps: str = "reference"):
        super().__init__(cfg)
        self.name = name
        self.recipe = recipe
        self.pretrained, self.lora, self.freeze_text, self.taps = pretrained, lora, freeze_text, taps

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        if self.pretrained:  # the same pretrained weights whatever the seed, as a fine-tuning run has
            state, _ = pretrained_state(REF_PRETRAIN)
            model.load_state_dict(state)
        if self.lora:  # adapters on the decoder's attention projections; the whole base frozen
            freeze(model)
            add_lora(model, r"blocks\.\d+\.(self_attn\.(qkv|out)|cross_attn\.(q|kv|out))")
        if self.freeze_text:
            freeze(model.text_encoder)
        return model

    def micro_batches(self, batch: Batch, n: int) -> list[Batch]:
        size = -(-len(batch) // n)
        return [Batch(batch.clips[i : i + size], batch.sample_rate, batch.captions[i : i + size],
                      batch.metadata[i : i + size], batch.seed * 31 + i)
                for i in range(0, len(batch), size)]

    def step(self, model: Any, batch: Batch, tap: Any = no_tap) -> StepOutput:
        if self.taps == "reference":
            return super().step(model, batch, tap)
        return self._own_step(model, batch, tap)

    def _own_step(self, model: Any, batch: Batch, tap: Any) -> StepOutput:
        """A solver that builds the model's inputs itself (delay pattern, shifted behind a start
        column) and computes the loss in its own layout."""
        cropped, valid, _ = self.prepare_audio(batch, tap)
        tokens = self.encode_tokens(cropped)  # [B, K, T]
        card = self.codec.cardinality
        tap("tokens", tokens, cardinality=card, frame_rate=self.codec.frame_rate)
        B, K, T = tokens.shape
        special = model.special_token
        pattern = build_delay_pattern(tokens, special)  # [B, K, S]
        inputs = torch.cat([pattern.new_full((B, K, 1), special), pattern[:, :, :-1]], dim=2)  # [B, K, S]
        if self.taps == "input-as-pattern":  # what the model reads, under the name the vocabulary had
            tap("tokens.pattern", inputs, special=special)
        else:  # the delayed codes as the pattern, and what the model reads as its input
            tap("tokens.pattern", pattern, special=special)
            tap("tokens.input", inputs, special=special)
        padding = self.padding_mask(valid, T)  # [B, T]
        tap("mask.padding", padding)
        with self.autocast():
            cond, cond_mask = self.condition(model, batch, tap)
            logits = model(inputs, cond, cond_mask)  # [B, K, S, card]: step s predicts pattern[:, :, s]
        if self.taps == "labels-btk":  # HF's convention: labels [B, S, K] in pattern time, -100 ignored
            valid_steps = pattern_valid_mask(K, T)[None].expand(B, K, -1)  # [B, K, S]
            frame = (torch.arange(pattern.shape[-1])[None, :] - torch.arange(K)[:, None]).clamp(0, T - 1)  # [K, S]
            kept = valid_steps & padding[:, frame]  # [B, K, S]
            labels = pattern.masked_fill(~kept, -100).transpose(1, 2)  # [B, S, K]
            tap("targets", labels, cardinality=card, ignore_index=-100)
            flat = logits.reshape(B * K, -1, card)  # [B*K, S, card]
            tap("logits", flat)
            loss = F.cross_entropy(flat.float().reshape(-1, card), labels.transpose(1, 2).reshape(-1),
                                   ignore_index=-100)
            tap("loss", loss)
            return StepOutput(loss=loss, logits=flat, targets=labels, extras={"padding_mask": padding})
        # AudioCraft's convention: logits brought back to frame time, targets the codes, a mask
        frame_logits = revert_delay_pattern(logits)  # [B, K, T, card]
        mask = revert_delay_pattern(pattern_valid_mask(K, T)[None]).expand(B, K, T) & padding[:, None, :]
        tap("targets", tokens, cardinality=card)
        tap("logits", frame_logits)
        tap("mask.loss", mask)
        loss, per_codebook = self.compute_loss(frame_logits, tokens, mask)
        tap("loss", loss)
        tap("loss.per_codebook", per_codebook)
        return StepOutput(loss=loss, logits=frame_logits, targets=tokens, mask=mask,
                          extras={"per_codebook": per_codebook, "padding_mask": padding})


def _ref(name: str, recipe: Recipe, **kw: Any) -> RefMember:
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in RefConfig.__dataclass_fields__}
    return RefMember(name, replace(RefConfig(), **cfg_kw), recipe, **kw)


ADAMW = Recipe("adamw", lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01, clip=1.0)


@member("ref", "reference", optimizer="adamw", lr=2e-3, schedule="warmup", batch=8, taps="reference")
def ref() -> ReferencePipeline:
    """The reference bed as shipped: AdamW 2e-3 with a 10-step warm-up, clipping at 1, weight decay
    0.01 on matrices, batch 8, 10 % condition dropout. Its own catalogue's clean control."""
    p = ReferencePipeline(RefConfig())
    p.name = "ref"
    return p


@member("ref-adam-3e4", "reference", optimizer="adam", lr=3e-4, schedule="constant")
def ref_adam() -> RefMember:
    """Plain Adam (no decoupled decay) at 3e-4, constant, clipping at 1: the textbook transformer
    default ("Karpathy's constant"), slower than the bed's 2e-3 but a rate recipes use."""
    return _ref("ref-adam-3e4", Recipe("adam", lr=3e-4, clip=1.0))


@member("ref-sgd", "reference", optimizer="sgd", lr=0.05, momentum=0.9, schedule="warmup")
def ref_sgd() -> RefMember:
    """SGD with Nesterov momentum 0.9 at 0.05 after a 20-step warm-up, clipping at 1: a plain
    optimiser people still reach for; slower per step than Adam on a transformer, not broken."""
    return _ref("ref-sgd", Recipe("sgd", lr=0.05, momentum=0.9, nesterov=True, schedule="warmup", warmup=20, clip=1.0))


@member("ref-adafactor", "reference", optimizer="adafactor", lr=1e-3, schedule="constant")
def ref_adafactor() -> RefMember:
    """transformers' Adafactor at a fixed 1e-3 (scale_parameter=False, relative_step=False): the
    T5 fine-tuning recipe of the transformers docs, from scratch here."""
    return _ref("ref-adafactor", Recipe("adafactor", lr=1e-3, clip=1.0))


@member("ref-audiocraft", "reference", optimizer="adamw", lr=1e-4, schedule="warmup-cosine", warmup=4000,
        weight_decay=0.1)
def ref_audiocraft() -> RefMember:
    """AudioCraft's MusicGen solver settings: AdamW 1e-4, betas (0.9, 0.95), weight decay 0.1, a
    4000-step linear warm-up then cosine, clipping at 1. The first updates run at a tiny fraction of
    the rate by design: a long warm-up is slow to start, not broken."""
    return _ref("ref-audiocraft", Recipe("adamw", lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                         schedule="warmup-cosine", warmup=4000, total=200_000, clip=1.0))


@member("ref-1e5", "reference", optimizer="adamw", lr=1e-5, schedule="constant")
def ref_1e5() -> RefMember:
    """AdamW at 1e-5 from scratch: the low end of fine-tuning recipes. From scratch it is slow,
    and slow is not broken: every update reaches every weight."""
    return _ref("ref-1e5", replace(ADAMW, lr=1e-5))


@member("ref-accum4-noclip", "reference", optimizer="adamw", lr=1e-3, accum=4, clip=None, weight_decay=0.0)
def ref_accum() -> RefMember:
    """AdamW 1e-3 without clipping or weight decay, the batch of 8 taken as 4 micro-batches of 2
    whose losses, each weighted by its share, are summed before one step: gradient accumulation."""
    return _ref("ref-accum4-noclip", Recipe("adamw", lr=1e-3, clip=None, accum=4))


@member("ref-bf16", "reference", optimizer="adamw", lr=1e-3, amp="bf16")
def ref_bf16() -> RefMember:
    """The forward under bf16 autocast on the CPU (no scaler: bf16 keeps float32's range), AdamW 1e-3
    with a 50-step warm-up, clipping at 1, batch 16."""
    return _ref("ref-bf16", replace(ADAMW, schedule="warmup", warmup=50, amp="bf16"), batch_size=16)


@member("ref-drop05", "reference", optimizer="adamw", lr=1e-3, cond_dropout=0.5, dropout=0.1)
def ref_drop05() -> RefMember:
    """Half the captions dropped for classifier-free guidance (the top of what recipes use) and
    dropout 0.1 in the decoder: validation loss may sit below training loss, by design."""
    return _ref("ref-drop05", ADAMW, cond_dropout=0.5, dropout=0.1)


@member("ref-fp16", "reference", optimizer="adamw", lr=2e-3, amp="fp16")
def ref_fp16() -> ReferencePipeline:
    """The bed's own fp16 path: autocast to float16 with a GradScaler, which skips the steps whose
    scaled gradients overflow while it finds its scale (an infinite norm on a skipped step is the
    scaler working, not a fault)."""
    p = ReferencePipeline(RefConfig(amp="fp16"))
    p.name = "ref-fp16"
    return p


@member("ref-input-as-pattern", "reference", optimizer="adamw", lr=1e-3, taps="input-as-pattern")
def ref_input_as_pattern() -> RefMember:
    """A solver that shifts the delayed codes behind a start column itself and taps what the model
    reads as `tokens.pattern` (the stage vocabulary had no name for it). Targets are the codes in
    frame time, the logits brought back to frame time: the model predicts step s from steps < s."""
    return _ref("ref-input-as-pattern", ADAMW, taps="input-as-pattern")


@member("ref-input", "reference", optimizer="adamw", lr=1e-3, taps="pattern+input")
def ref_input() -> RefMember:
    """The same solver tapping the delayed codes as `tokens.pattern` and the shifted decoder inputs
    as `tokens.input` (what the model reads)."""
    return _ref("ref-input", ADAMW, taps="pattern+input")


@member("ref-labels-btk", "reference", optimizer="adamw", lr=1e-3, taps="labels-btk")
def ref_labels_btk() -> RefMember:
    """HF's loss convention on the reference model: labels [B, T', K] in pattern time with -100 on
    the pattern's edges and on padding, logits [B*K, T', V], no mask tapped (the ignore index says
    it), one cross-entropy over the kept positions; the delayed codes tapped as `tokens.pattern`, the
    shifted decoder inputs as `tokens.input`."""
    return _ref("ref-labels-btk", ADAMW, taps="labels-btk")


@member("ref-ft-lora", "reference", pretrained="reference", optimizer="adamw", lr=2e-4, lora=True)
def ref_ft_lora() -> RefMember:
    """The pretrained reference, LoRA (peft, r 8, alpha 16) on every attention projection of the
    decoder, the whole base frozen (text encoder included), AdamW 2e-4: the dreambooth LoRA
    recipe. LoRA's B matrices start at zero, so the A matrices get no gradient on the first step."""
    return _ref("ref-ft-lora", Recipe("adamw", lr=2e-4, clip=1.0), pretrained=True, lora=True)


@member("ref-ft-frozen-text", "reference", pretrained="reference", optimizer="adamw", lr=1e-4,
        schedule="warmup-cosine", freeze_text=True)
def ref_ft_frozen_text() -> RefMember:
    """The pretrained reference fine-tuned at 1e-4 (warm-up 100, cosine over 5000) with its trained
    text encoder frozen, as MusicGen freezes T5: the condition path still learns through the
    cross-attention."""
    return _ref("ref-ft-frozen-text", Recipe("adamw", lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01,
                                             schedule="warmup-cosine", warmup=100, total=5000, clip=1.0),
                pretrained=True, freeze_text=True)
