"""NaN and infinite values where HF MusicGen fine-tuning meets them: a loss over no labels, an
attention mask handed over in the additive form, a per-clip peak normalisation of silent exports,
corrupt float WAVs, and a checkpoint saved after the step that went non-finite."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import soxr
import torch

from signalchain.integrations.hf_musicgen import delayed_codes, labels_from_pattern

from ._registry import fault, patch_model
from ._util import replace_examples, short_examples

if TYPE_CHECKING:
    from signalchain.integrations.hf_musicgen import Example

    from ..pipeline import HFBedPipeline

SECTION = "NaN and infinite values"


# ---- 1. division by zero ------------------------------------------------------------------------------

@fault("peak_normalise_silent_clips", "nonfinite", "division by zero", SECTION,
       ["nonfinite.first", "audio.nonfinite"], "audio.resampled", symptom="nan")
def _peak_normalise_silent_clips(p: HFBedPipeline) -> None:
    # The data: the short clips of this collection are failed exports, digital silence. Harmless by
    # itself (the clean pipeline trains on them without trouble).
    replace_examples(p, short_examples(p), np.zeros_like)

    def resample(examples: list[Example]) -> list[np.ndarray]:
        out = []
        for e in examples:
            x = e.audio if e.sample_rate == p.codec_rate else soxr.resample(e.audio.T, e.sample_rate, p.codec_rate).T
            # Bug: each clip is peak-normalised after resampling (`librosa.util.normalize` written
            # out by hand, without its threshold): 0 / 0 for a silent clip, NaN in every sample.
            with np.errstate(divide="ignore", invalid="ignore"):
                out.append(np.ascontiguousarray(x / np.abs(x).max(), dtype=np.float32))
        return out

    p.resample = resample  # type: ignore[method-assign]


# ---- 7. non-finite input audio ------------------------------------------------------------------------

@fault("nan_blocks_in_float_wavs", "nonfinite", "non-finite input audio", SECTION,
       ["nonfinite.input", "audio.nonfinite"], "audio.original", symptom="nan")
def _nan_blocks_in_float_wavs(p: HFBedPipeline) -> None:
    def corrupt(audio: np.ndarray) -> np.ndarray:
        # The data: float32 WAVs bounced from a DAW with a corrupt block every 0.25 s decode to
        # NaN samples.
        # Bug: the dataset's `Audio` column decodes them as they are and nothing checks the
        # decoded arrays; the NaNs flow through resampling into the codec.
        block = 1000
        for start in range(0, audio.shape[-1], 8000):
            audio[:, start : start + block] = np.nan
        return audio

    replace_examples(p, short_examples(p), corrupt)


# ---- 8. empty reductions ----------------------------------------------------------------------------

@fault("labels_all_ignored", "nonfinite", "an empty reduction: every label is the ignore index", SECTION,
       ["mask.empty", "nonfinite.loss"], "mask.loss", symptom="nan")
def _labels_all_ignored(p: HFBedPipeline) -> None:
    def make_labels(model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pattern = delayed_codes(model.decoder, codes, p.pad_token_id)
        # Bug: the label helper was written against a collator that passed valid lengths in
        # samples (as the feature extractor's padding_mask gives them) and converts them to frames
        # (`// hop`); it now receives frames already: 100 // 320 = 0 valid frames for every clip,
        # every label is -100, and HF's mean cross-entropy over no targets is 0 / 0 = NaN.
        return pattern, labels_from_pattern(pattern, valid // p.hop, p.pad_token_id, p.audio_channels)

    p.make_labels = make_labels  # type: ignore[method-assign]


# ---- 9. invalid masks ---------------------------------------------------------------------------------

@fault("additive_attention_mask", "nonfinite", "an invalid attention mask (additive form passed as 0/1)", SECTION,
       ["nonfinite.first"], "logits", symptom="nan")
def _additive_attention_mask(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: code ported from an older BERT-style stack turns the 0/1 mask into the additive
        # form itself, `(1 - mask) * finfo.min`, before calling the model. HF takes 0/1 masks: it
        # multiplies the text states by the mask (-3.4e38 * h = -inf for padded tokens) and reads
        # nonzero as "keep", so the decoder's cross-attention averages infinities: NaN logits.
        additive = (1.0 - mask.float()) * torch.finfo(torch.float32).min
        return model(input_ids=ids, attention_mask=additive, labels=labels)

    p.forward = forward  # type: ignore[method-assign]


# ---- 10. corrupted model state ------------------------------------------------------------------------

@fault("nan_weight_in_checkpoint", "nonfinite", "corrupted model state", SECTION,
       ["nonfinite.state"], "model", symptom="nan")
def _nan_weight_in_checkpoint(p: HFBedPipeline) -> None:
    def resume(model: Any) -> None:
        # Bug: the run resumes from the last `save_pretrained` checkpoint of a diverged fp16 run: the
        # Trainer saved it right after the step that wrote NaN into the weights (nothing checks a
        # checkpoint before saving or loading it). One row of one feed-forward matrix is NaN.
        with torch.no_grad():
            model.decoder.model.decoder.layers[0].fc2.weight[3].fill_(float("nan"))

    patch_model(p, resume)
