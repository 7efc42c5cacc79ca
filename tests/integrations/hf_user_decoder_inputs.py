"""The hand-written HF MusicGen loop of `hf_user_pipeline.py`, building its own decoder inputs.

Many fine-tuning scripts make `decoder_input_ids` themselves instead of letting the model shift the
labels: the labels moved right by one behind the decoder start token, -100 replaced by the pad id
(what transformers' `shift_tokens_right` does). They tap what the model reads, under one name or
another and in one layout or another:

    tap_as   "tokens.input" (what docs/taps.md asks for) or "tokens.pattern" (the name users reach for)
    layout   "BKT" ([B, K, T'], what `shift_tokens_right` returns), "BTK" ([B, T', K], the labels'
             layout) or "(BK)T" ([B*K, T'], what the decoder reshapes them to)
    inputs   "shifted" (right) or "labels" (the bug: decoder_input_ids = labels, unshifted)
    padded   whether the golden batch holds a clip shorter than the crop (padding frames)

    signalchain doctor tests/integrations/hf_user_decoder_inputs.py:make_pipeline              # tokens.input
    signalchain doctor tests/integrations/hf_user_decoder_inputs.py:make_pipeline_as_pattern   # the issue's loop
    signalchain doctor tests/integrations/hf_user_decoder_inputs.py:make_pipeline_unshifted    # the bug
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.models.musicgen.modeling_musicgen import shift_tokens_right

from signalchain import StepOutput

__all__ = ["HFUserDecoderInputs", "make_pipeline", "make_pipeline_as_pattern", "make_pipeline_unshifted",
           "decoder_inputs"]


def _base() -> Any:
    name = "_hf_user_pipeline_under_test"  # the same module object the other tests load
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "hf_user_pipeline.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_hf = _base()


def decoder_inputs(labels: torch.Tensor, pad: int, start: int, shifted: bool = True) -> torch.Tensor:
    """Decoder input ids `[B, K, T']` from labels `[B, T', K]` (HF's `shift_tokens_right`), or the
    labels themselves with -100 as the pad id (`shifted=False`: the bug)."""
    if shifted:
        return shift_tokens_right(labels, pad, start)
    return labels.masked_fill(labels == -100, pad).transpose(1, 2).contiguous()


def _layout(ids: torch.Tensor, layout: str) -> torch.Tensor:
    b, k, t = ids.shape
    return {"BKT": ids, "BTK": ids.transpose(1, 2).contiguous(), "(BK)T": ids.reshape(b * k, t)}[layout]


class HFUserDecoderInputs(_hf.HFUserPipeline):
    """`HFUserPipeline` whose step builds and taps `decoder_input_ids` itself."""

    name = "hf-user-decoder-inputs"

    def __init__(self, tap_as: str = "tokens.input", layout: str = "BKT", inputs: str = "shifted",
                 padded: bool = True, settings: dict[str, Any] | None = None):
        super().__init__(settings)
        self.tap_as, self.layout, self.inputs, self.padded = tap_as, layout, inputs, padded

    def golden_batch(self, seed: int) -> dict[str, Any]:
        if self.padded:
            return super().golden_batch(seed)
        sr = self.s["source_sample_rate"]
        clips = [_hf.generate_clip(i, 100 + seed, sr, seconds=1.5 + 0.2 * i) for i in range(self.s["batch_size"])]
        return self.collate([self._as_row(c) for c in clips], seed)

    def step(self, model: Any, batch: dict[str, Any], tap: Any = _hf._no_tap) -> StepOutput:
        cropped, valid = self.prepare_audio(batch, tap)
        audio = torch.from_numpy(cropped)
        sample_mask = torch.arange(self.segment)[None, :] < torch.from_numpy(valid)[:, None]
        with torch.no_grad():
            codes = model.audio_encoder.encode(audio, padding_mask=sample_mask).audio_codes[0]  # [B, K, T]
        tap("tokens", codes, cardinality=self.s["codebook_size"], frame_rate=self.frame_rate)
        valid_frames = torch.from_numpy(np.ceil(valid / self.hop).astype(np.int64))
        padding = torch.arange(codes.shape[-1])[None, :] < valid_frames[:, None]
        tap("mask.padding", padding)

        _, labels = self.labels_from_codes(model, codes, valid_frames)  # [B, T', K] with -100
        cfg = model.generation_config
        inputs = decoder_inputs(labels, cfg.pad_token_id, cfg.decoder_start_token_id, self.inputs == "shifted")
        tap(self.tap_as, _layout(inputs, self.layout))
        tap("targets", labels, cardinality=self.s["codebook_size"], ignore_index=-100)
        loss_mask = (labels != -100).transpose(1, 2)  # [B, K, T']
        tap("mask.loss", loss_mask)

        rng = np.random.default_rng([batch["seed"], 2])
        dropped = rng.random(len(batch["caption"])) < self.s["cond_dropout"]
        captions = ["" if d else c for c, d in zip(batch["caption"], dropped)]
        tap("condition.dropped", torch.from_numpy(dropped), rate=self.s["cond_dropout"])
        text = self.tokenize(captions)
        tap("condition.tokens", text["input_ids"], max_len=self.s["text_max_length"],
            vocab_size=len(self.tokenizer))
        tap("condition.mask", text["attention_mask"].bool())

        b, k, tp = inputs.shape
        out = model(input_ids=text["input_ids"], attention_mask=text["attention_mask"],
                    decoder_input_ids=inputs.reshape(b * k, tp), labels=labels)
        tap("condition.embedding", out.encoder_last_hidden_state)
        tap("logits", out.logits)  # [B*K, T', V]
        tap("loss", out.loss)
        return StepOutput(loss=out.loss, logits=out.logits, targets=labels, mask=loss_mask,
                          extras={"padding_mask": padding, "codes": codes})


def make_pipeline() -> HFUserDecoderInputs:
    return HFUserDecoderInputs()


def make_pipeline_as_pattern() -> HFUserDecoderInputs:
    """The loop of issue 24: decoder inputs tapped as tokens.pattern, every clip longer than the crop."""
    return HFUserDecoderInputs("tokens.pattern", "BKT", "shifted", padded=False)


def make_pipeline_unshifted() -> HFUserDecoderInputs:
    """decoder_input_ids = labels (-100 as the pad id), tapped as tokens.input."""
    return HFUserDecoderInputs("tokens.input", "BKT", "labels")
