"""The boundaries of HF MusicGen's training step, broken the way fine-tuning code breaks them: the
labels' layout, the delay pattern, the pad id, the padding frames, the decoder inputs the model
makes from the labels (or is handed instead), and the frozen codec that encodes the audio."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from signalchain.integrations.hf_musicgen import delayed_codes, labels_from_pattern

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..pipeline import HFBedPipeline

SECTION = "Real-world example: tracing MusicGen's training step"


# ---- labels: layout, delay pattern, pad id, padding --------------------------------------------

@fault("labels_bkt_reshaped", "step_boundaries", "targets laid out wrongly ([B, K, T] reshaped, not transposed)",
       SECTION, ["targets.random", "targets.misaligned"], "targets", symptom="flat-loss")
def _labels_bkt_reshaped(p: HFBedPipeline) -> None:
    def make_labels(model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pattern = delayed_codes(model.decoder, codes, p.pad_token_id)  # [B, K, T']
        labels = labels_from_pattern(pattern, valid, p.pad_token_id, p.audio_channels).transpose(1, 2)  # [B, K, T']
        # Bug: the labels were kept codebook-first [B, K, T'] as the codec returns them; HF crashed
        # in cross-attention ("size of tensor a (103) must match ... (4)"), and the "fix" was
        # `labels.reshape(B, -1, K)` instead of `.transpose(1, 2)`: the shape is right, the values
        # are read row by row across codebooks and frames — targets scrambled against the codes.
        b, k, tp = labels.shape
        return pattern, labels.reshape(b, tp, k)

    p.make_labels = make_labels  # type: ignore[method-assign]


@fault(
    "delay_pattern_stereo_formula",
    "step_boundaries",
    "the delay pattern is built for the wrong number of codebooks",
    SECTION,
    ["targets.misaligned"],
    "targets",
    symptom=None,
)
def _delay_pattern_stereo_formula(p: HFBedPipeline) -> None:
    channels = 2

    def make_labels(model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: the label code was copied from a musicgen-stereo fine-tune, which delays codebook
        # pairs together (`delay = k // 2`, K / 2 = 2 delay steps for 4 codebooks). This checkpoint is
        # mono: its decoder (and `generate`) use one delay step per codebook (0, 1, 2, 3), so every
        # codebook but the first is trained at a position generation never asks it for.
        b, k, t = codes.shape
        delay = [i // channels for i in range(k)]
        pattern = torch.full((b, k, t + max(delay)), p.pad_token_id, dtype=codes.dtype)
        for i, d in enumerate(delay):
            pattern[:, i, d : d + t] = codes[:, i]
        return pattern, labels_from_pattern(pattern, valid, p.pad_token_id, audio_channels=channels)

    p.make_labels = make_labels  # type: ignore[method-assign]


@fault("pattern_pad_from_tokenizer", "step_boundaries", "the pad id of the delay pattern is not the model's",
       SECTION, ["mask.padding_trained"], "mask.loss", symptom="silent")
def _pattern_pad_from_tokenizer(p: HFBedPipeline) -> None:
    def make_labels(model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: the delay pattern is built with `pad_token_id=processor.tokenizer.pad_token_id` (T5's
        # pad, 0) instead of the decoder's (64 here, 2048 in MusicGen). HF only ignores labels equal
        # to *its* pad id, and the -100 step compares with the decoder's too: the pattern's empty
        # corner stays in the labels as code 0 — trained as a target and fed back as decoder input,
        # where generation puts the pad id.
        pattern = delayed_codes(model.decoder, codes, p.tokenizer.pad_token_id)
        return pattern, labels_from_pattern(pattern, valid, p.pad_token_id, p.audio_channels)

    p.make_labels = make_labels  # type: ignore[method-assign]


@fault("padding_frames_trained", "step_boundaries", "the loss counts padded frames", SECTION,
       ["mask.padding_trained"], "mask.loss", symptom="silent")
def _padding_frames_trained(p: HFBedPipeline) -> None:
    def make_labels(model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pattern = delayed_codes(model.decoder, codes, p.pad_token_id)
        # Bug: the valid lengths come from the feature extractor's `padding_mask`, but the collator
        # had already zero-padded every crop to the segment length before calling it: the mask is all
        # ones, no frame is set to -100, and the codes of the zero padding (silence) are trained as
        # targets at the end of every short clip.
        every_frame = torch.full_like(valid, codes.shape[-1])
        return pattern, labels_from_pattern(pattern, every_frame, p.pad_token_id, p.audio_channels)

    p.make_labels = make_labels  # type: ignore[method-assign]


# ---- decoder inputs handed to the model ---------------------------------------------------------------

@fault("decoder_inputs_fixed_length", "step_boundaries", "logits and targets have incompatible shapes", SECTION,
       ["shape.mismatch"], "targets", symptom="flat-loss")
def _decoder_inputs_fixed_length(p: HFBedPipeline) -> None:
    from ._util import hf_decoder_inputs

    columns = 128  # max_duration * frame rate, rounded up for static shapes

    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: for static shapes (torch.compile, TPU), the collator pads `decoder_input_ids` to a fixed
        # 128 columns with the pad id, and the labels stay at their own length (103). HF silently
        # aligns them from the right (`lm_logits[:, :, -labels.shape[1]:]`): the loss compares the
        # predictions at positions 25-127 (mostly after the inputs' padding) with targets 0-102.
        inputs = hf_decoder_inputs(model, labels)
        inputs = torch.nn.functional.pad(
            inputs, (0, columns - inputs.shape[-1]), value=model.config.decoder.pad_token_id
        )
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=inputs, labels=labels)

    p.forward = forward  # type: ignore[method-assign]


@fault("minus100_decoder_inputs", "step_boundaries", "the ignore index is fed to the decoder as an input id", SECTION,
       ["pipeline.step_failed"], "targets", symptom="flat-loss")
def _minus100_decoder_inputs(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: the decoder inputs are made by hand, the text-LM way: the start token, then the labels
        # shifted right. `shift_tokens_right` would replace -100 with the pad id; the hand-written
        # shift does not, and -100 reaches the codebook embeddings (IndexError on CPU, a device-side
        # assert on GPU).
        b, tp, k = labels.shape
        start = torch.full((b, 1, k), model.config.decoder.decoder_start_token_id, dtype=labels.dtype)
        inputs = torch.cat([start, labels[:, :-1]], dim=1)  # [B, T', K], -100 kept
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=inputs.transpose(1, 2).reshape(b * k, tp),
                     labels=labels)

    p.forward = forward  # type: ignore[method-assign]


# ---- the codec that makes the labels --------------------------------------------------------------------

@fault("codec_unfrozen_ddp_hack", "step_boundaries", "the codec that encodes the audio is trained along", SECTION,
       ["codec.trained"], "model", symptom=None)
def _codec_unfrozen_ddp_hack(p: HFBedPipeline) -> None:
    def unfreeze(model: Any) -> None:
        # Bug, in three steps that each looked harmless: a "full fine-tune" flag calls
        # `model.requires_grad_(True)`, undoing `freeze_audio_encoder()`; DDP then complained that the
        # codec's parameters got no gradient, which was "fixed" with the known hack
        # `loss + 0 * sum(p.sum() for p in model.parameters())` (below); and the Trainer-style config
        # sets `weight_decay=0.01`. Every codec weight now has a zero gradient, so AdamW decays it
        # every step: the codec that makes the labels drifts while the decoder learns its codes.
        model.requires_grad_(True)

    def param_groups(model: Any) -> list[dict[str, Any]]:
        return [{"params": [q for q in model.parameters() if q.requires_grad], "lr": p.lr}]

    forward = p.forward

    def forward_all_used(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        out = forward(model, ids, mask, labels)
        out.loss = out.loss + 0.0 * sum(q.sum() for q in model.parameters() if q.requires_grad)
        return out

    p.weight_decay = 0.01
    patch_model(p, unfreeze)
    p.param_groups = param_groups  # type: ignore[method-assign]
    p.forward = forward_all_used  # type: ignore[method-assign]
