"""Zoo members on the HF MusicGen bed (`signalchain.reference.hf`): recipes from HF fine-tuning
scripts, a stereo checkpoint, LoRA with `peft`, a frozen T5, and hand-written loops that build the
decoder inputs or the loss themselves."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from signalchain import StepOutput
from signalchain.integrations.hf_musicgen import Batch
from signalchain.reference.hf import HFBedConfig, HFBedPipeline
from signalchain.reference.hf.tiny import TinyConfig

from ._lora import add_lora, freeze
from ._member import member
from ._recipe import Recipe, RecipeMixin, no_tap
from .pretrained import PretrainSpec, pretrained_state

__all__ = ["HFMember", "HF_PRETRAIN"]

HF_PRETRAIN_STEPS = 300


def _bed() -> HFBedPipeline:
    return HFBedPipeline(HFBedConfig())


HF_PRETRAIN = PretrainSpec("hf", _bed, HFBedConfig().to_dict(), HF_PRETRAIN_STEPS)


class HFMember(RecipeMixin, HFBedPipeline):
    """The HF bed with a recipe, an optional pretrained start, LoRA on the decoder or a frozen text
    encoder, and one of several loops: HF's own (`taps="hf"`), a loop that shifts the labels into
    decoder inputs itself (`"input-as-pattern"`, `"pattern+input"`), or an AudioCraft-style loss in
    frame time over HF's logits (`"frame-time"`)."""

    def __init__(self, name: str, cfg: HFBedConfig, recipe: Recipe, *, pretrained: bool = False,
                 lora: bool = False, freeze_text: bool = False, taps: str = "hf"):
        super().__init__(cfg)
        self.name = name
        self.recipe = recipe
        self.pretrained, self.lora, self.taps = pretrained, lora, taps
        self.train_text_encoder = not freeze_text

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)  # codec frozen; text encoder frozen when asked
        if self.pretrained:
            state, _ = pretrained_state(HF_PRETRAIN)
            model.load_state_dict(state)
        if self.lora:  # the dreambooth LoRA recipe: adapters on the decoder's q/v projections, base frozen
            freeze(model)
            add_lora(model.decoder, r".*layers\.\d+\.(self_attn|encoder_attn)\.(q_proj|v_proj)")
        return model

    def zoo_groups(self, model: Any) -> list[tuple[list[torch.nn.Parameter], float, bool]]:
        """The decoder at the rate, the text encoder at `text_lr_scale` of it; no decay on biases and norms."""
        text = [p for p in model.text_encoder.parameters() if p.requires_grad]
        skip = {id(p) for p in text} | {id(p) for p in model.audio_encoder.parameters()}
        rest = [p for p in model.parameters() if p.requires_grad and id(p) not in skip]
        out = []
        for params, scale in ((rest, 1.0), (text, self.text_lr_scale)):
            out += [([p for p in params if p.dim() >= 2], scale, True),
                    ([p for p in params if p.dim() < 2], scale, False)]
        return out

    def micro_batches(self, batch: Batch, n: int) -> list[Batch]:
        size = -(-len(batch) // n)
        return [Batch(batch.examples[i : i + size], batch.seed * 31 + i) for i in range(0, len(batch), size)]

    def step(self, model: Any, batch: Batch, tap: Any = no_tap) -> StepOutput:
        if self.taps == "hf":
            return super().step(model, batch, tap)
        return self._own_step(model, batch, tap)

    def _own_step(self, model: Any, batch: Batch, tap: Any) -> StepOutput:
        from transformers.models.musicgen.modeling_musicgen import shift_tokens_right

        cropped, valid = self.prepare_audio(batch, tap)
        codes = self.encode(model, torch.from_numpy(cropped))  # [B, K, T]
        tap("tokens", codes, cardinality=self.cardinality, frame_rate=self.frame_rate)
        B, K, T = codes.shape
        frames = self.valid_frames(valid, T)
        padding = torch.arange(T)[None, :] < frames[:, None]  # [B, T]
        tap("mask.padding", padding)
        pattern, labels = self.make_labels(model, codes, frames)  # [B, K, T'], [B, T', K]
        start = int(model.config.decoder.decoder_start_token_id)
        inputs = shift_tokens_right(labels, self.pad_token_id, start)  # [B, K, T']: HF's own shift
        if self.taps == "input-as-pattern":
            tap("tokens.pattern", inputs, special=self.pad_token_id)
        else:
            tap("tokens.pattern", pattern, special=self.pad_token_id)
            if self.taps == "pattern+input":
                tap("tokens.input", inputs, special=self.pad_token_id)
        captions, dropped = self.drop_captions([e.caption for e in batch.examples],
                                               np.random.default_rng([batch.seed, 2]))
        tap("condition.dropped", dropped, rate=self.cond_dropout)
        ids, mask = self.tokenize(captions)
        tap("condition.tokens", ids, max_len=self.max_text_len)
        tap("condition.mask", mask)
        if self.taps == "frame-time":
            return self._frame_time_loss(model, ids, mask, codes, labels, padding, tap)
        tap("targets", labels, ignore_index=-100)
        with self.autocast():
            out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=inputs.reshape(B * K, -1),
                        labels=labels)
        tap("condition.embedding", out.encoder_last_hidden_state)
        tap("logits", out.logits)
        loss_mask = ((labels != -100) & (labels != self.pad_token_id)).transpose(1, 2)  # [B, K, T']
        tap("mask.loss", loss_mask)
        tap("loss", out.loss)
        return StepOutput(loss=out.loss, logits=out.logits, targets=labels, mask=loss_mask,
                          extras={"padding_mask": padding})

    def _frame_time_loss(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor,
                         labels: torch.Tensor, padding: torch.Tensor, tap: Any) -> StepOutput:
        """AudioCraft's loss over HF's model: each codebook's logits taken back by its delay to the
        frame they predict, the codes as targets, the padding mask in frame time."""
        B, K, T = codes.shape
        with self.autocast():
            out = model(input_ids=ids, attention_mask=mask, labels=labels)  # HF makes the decoder inputs
        tap("condition.embedding", out.encoder_last_hidden_state)
        tp = labels.shape[1]
        lg = out.logits.reshape(B, K, -1, out.logits.shape[-1])[:, :, -tp:]  # [B, K, T', V]
        delay = torch.tensor(self._delays(K))  # [K]
        index = torch.arange(T)[None, :] + delay[:, None]  # [K, T]: the pattern position of each frame
        frame_logits = lg[:, torch.arange(K)[:, None], index]  # [B, K, T, V]
        loss_mask = padding[:, None, :].expand(B, K, T)
        tap("targets", codes, cardinality=self.cardinality)
        tap("logits", frame_logits)
        tap("mask.loss", loss_mask)
        ce = F.cross_entropy(frame_logits.float().reshape(-1, frame_logits.shape[-1]), codes.reshape(-1),
                             reduction="none").view(B, K, T)
        loss = (ce * loss_mask).sum() / loss_mask.sum().clamp(min=1)
        tap("loss", loss)
        return StepOutput(loss=loss, logits=frame_logits, targets=codes, mask=loss_mask,
                          extras={"padding_mask": padding})

    def _delays(self, k: int) -> list[int]:
        return [i // self.audio_channels for i in range(k)]


def _hf(name: str, recipe: Recipe, tiny: TinyConfig | None = None, **kw: Any) -> HFMember:
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in HFBedConfig.__dataclass_fields__}
    cfg = replace(HFBedConfig(), **cfg_kw)
    if tiny is not None:
        cfg = replace(cfg, tiny=tiny)
    return HFMember(name, cfg, recipe, **kw)


HF_ADAMW = Recipe("adamw", lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, clip=1.0)


@member("hf", "hf", optimizer="adamw", lr=3e-3, batch=4, taps="hf")
def hf() -> HFBedPipeline:
    """The HF bed as shipped: HF's own loss and decoder inputs, AdamW 3e-3 (text encoder at 0.1 of
    it), clipping at 1, batch 4, 10 % caption dropout. Its own catalogue's clean control."""
    p = HFBedPipeline(HFBedConfig())
    p.name = "hf"
    return p


@member("hf-1e4", "hf", optimizer="adamw", lr=1e-4, taps="hf")
def hf_1e4() -> HFMember:
    """The README's `--hf-set lr=1e-4`: AdamW 1e-4, the rate of AudioCraft's MusicGen solver and of
    HF fine-tuning scripts. From scratch it learns slowly, and slow is not broken."""
    return _hf("hf-1e4", HF_ADAMW)


@member("hf-adafactor", "hf", optimizer="adafactor", lr=1e-3, accum=2)
def hf_adafactor() -> HFMember:
    """transformers' Adafactor at a fixed 1e-3 (the T5 recipe), two micro-batches of 2 per update."""
    return _hf("hf-adafactor", Recipe("adafactor", lr=1e-3, clip=1.0, accum=2))


@member("hf-linear", "hf", optimizer="adamw", lr=5e-4, schedule="linear", weight_decay=0.05)
def hf_linear() -> HFMember:
    """HF Trainer's default schedule: AdamW 5e-4 decaying linearly to 0 over 2000 steps, weight
    decay 0.05 off biases and norms, clipping at 1."""
    return _hf("hf-linear", Recipe("adamw", lr=5e-4, weight_decay=0.05, schedule="linear", total=2000, clip=1.0))


@member("hf-bf16", "hf", optimizer="adamw", lr=2e-4, amp="bf16", schedule="warmup")
def hf_bf16() -> HFMember:
    """HF's forward under bf16 autocast (no scaler), AdamW 2e-4 after a 20-step warm-up, batch 8."""
    return _hf("hf-bf16", Recipe("adamw", lr=2e-4, schedule="warmup", warmup=20, clip=1.0, amp="bf16"),
               batch_size=8)


@member("hf-stereo", "hf", optimizer="adamw", lr=1e-3, channels=2)
def hf_stereo() -> HFMember:
    """A stereo checkpoint (audio_channels 2): each channel encoded apart and the codebooks
    interleaved, both channels of a pair sharing a delay, as HF's stereo MusicGen trains."""
    return _hf("hf-stereo", replace(HF_ADAMW, lr=1e-3), tiny=TinyConfig(audio_channels=2))


@member("hf-drop0", "hf", optimizer="adam", lr=3e-4, cond_dropout=0.0, guidance=1.0, clip=None)
def hf_drop0() -> HFMember:
    """No caption dropout (a model sampled without guidance: guidance_scale 1), plain Adam 3e-4, no
    clipping. (Until issue 41 it generated at the bed's guidance 3 while its description said none;
    `generation.guidance_untrained` found the contradiction.)"""
    return _hf("hf-drop0", Recipe("adam", lr=3e-4, clip=None), cond_dropout=0.0, guidance_scale=1.0)


@member("hf-input-as-pattern", "hf", optimizer="adamw", lr=1e-4, taps="input-as-pattern")
def hf_input_as_pattern() -> HFMember:
    """A hand-written loop that builds the decoder inputs itself with HF's `shift_tokens_right`
    (the labels shifted right behind the start token) and taps them as `tokens.pattern`: the
    issue's trap. The model reads exactly what HF's own forward would make from the labels."""
    return _hf("hf-input-as-pattern", HF_ADAMW, taps="input-as-pattern")


@member("hf-input", "hf", optimizer="adamw", lr=1e-4, taps="pattern+input")
def hf_input() -> HFMember:
    """The same loop tapping the delayed codes as `tokens.pattern` and the shifted decoder inputs
    as `tokens.input`."""
    return _hf("hf-input", HF_ADAMW, taps="pattern+input")


@member("hf-frame-time", "hf", optimizer="adamw", lr=1e-3, taps="frame-time")
def hf_frame_time() -> HFMember:
    """AudioCraft's loss over HF's model: each codebook's logits moved back by its delay to the
    frame they predict, targets the codes `[B, K, T]` with a frame-time mask."""
    return _hf("hf-frame-time", replace(HF_ADAMW, lr=1e-3), taps="frame-time")


@member("hf-ft-lora", "hf", pretrained="hf", optimizer="adamw", lr=2e-4, lora=True)
def hf_ft_lora() -> HFMember:
    """The pretrained bed, LoRA (peft, r 8) on the decoder's self- and cross-attention q/v
    projections, everything else frozen (T5, projection, codec), AdamW 2e-4: the public dreambooth
    LoRA script's recipe. LoRA's B starts at zero, so A gets no gradient on the first step."""
    return _hf("hf-ft-lora", Recipe("adamw", lr=2e-4, clip=1.0), pretrained=True, lora=True)


@member("hf-ft-frozen-text", "hf", pretrained="hf", optimizer="adamw", lr=1e-5, freeze_text=True)
def hf_ft_frozen_text() -> HFMember:
    """The pretrained bed fine-tuned at 1e-5 (the low end of MusicGen recipes) with its trained T5
    frozen (`freeze_text_encoder()`, MusicGen's own setting)."""
    return _hf("hf-ft-frozen-text", replace(HF_ADAMW, lr=1e-5), pretrained=True, freeze_text=True)
