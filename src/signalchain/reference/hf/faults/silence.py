"""Silent or nearly silent output, and audio that is not what the codec was told it is: a crop
drawn over the padded batch, a dataset never resampled, float audio divided as if it were PCM,
codebooks reversed on the way in or out of the codec, stereo codes laid out side by side."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ._registry import fault

if TYPE_CHECKING:
    from signalchain.integrations.hf_musicgen import Example

    from ..pipeline import HFBedPipeline

SECTION = "Silent or nearly silent output"


# ---- 1. the source audio is incorrectly normalised ---------------------------------------------------

@fault("float_audio_divided_as_pcm", "silence", "the source audio is incorrectly normalised", SECTION,
       ["audio.silent", "audio.scale"], "audio.resampled", symptom="silent")
def _float_audio_divided_as_pcm(p: HFBedPipeline) -> None:
    resample = p.resample

    def to_codec_rate(examples: list[Example]) -> list[np.ndarray]:
        # Bug: the preprocessing was written for `soundfile.read(dtype="int16")` and divides by
        # 32768; the HF `Audio` feature already returns float32 in [-1, 1]: every clip lands about
        # 90 dB down, and the codec encodes near-silence.
        return [x / 32768.0 for x in resample(examples)]

    p.resample = to_codec_rate  # type: ignore[method-assign]


@fault("dataset_rate_not_resampled", "silence", "the audio reaches the codec at the wrong sample rate", SECTION,
       ["audio.sample_rate"], "audio.resampled", symptom="silent")
def _dataset_rate_not_resampled(p: HFBedPipeline) -> None:
    def to_codec_rate(examples: list[Example]) -> list[np.ndarray]:
        # Bug: the resampling step reads the source rate from `model.config.audio_encoder.sampling_rate`
        # instead of each row's `audio["sampling_rate"]` ("the data is prepared for this model"): it
        # resamples 16 kHz to 16 kHz, a no-op. The 32 kHz clips reach the codec as 16 kHz audio,
        # twice as long and an octave down; a 2 s crop holds one second of music.
        return [np.ascontiguousarray(e.audio, dtype=np.float32) for e in examples]

    p.resample = to_codec_rate  # type: ignore[method-assign]


# ---- 3. the crop selects a padded region ---------------------------------------------------------

@fault("crop_from_padded_batch", "silence", "the crop selects an empty or padded region", SECTION,
       ["crop.in_padding"], "crop", symptom="silent")
def _crop_from_padded_batch(p: HFBedPipeline) -> None:
    def choose_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug: the random crop is drawn on the collated batch tensor (`audio.shape[-1]`, the longest
        # clip) instead of each clip's own length: shorter clips are cropped mostly from their zero
        # padding, and the model is trained to continue silence.
        total = int(lengths.max())
        starts = rng.integers(0, max(1, total - segment + 1), size=len(lengths))
        return np.stack([starts, starts + segment], axis=1).astype(np.int64)

    p.choose_crops = choose_crops  # type: ignore[method-assign]


# ---- 6. the decoder receives the wrong codebook order ------------------------------------------------

@fault("encode_codebooks_reversed", "silence", "the codec tokens are in the wrong codebook order", SECTION,
       ["tokens.codebook_order"], "tokens", symptom="silent")
def _encode_codebooks_reversed(p: HFBedPipeline) -> None:
    @torch.no_grad()
    def encode(model: Any, audio: torch.Tensor) -> torch.Tensor:
        # Bug: the codes are collected layer by layer from the residual quantizer (to keep each
        # layer's residual for a logging plot) with `codes.insert(0, layer_codes)`: the list comes out
        # finest-first. The decoder is trained on reversed codebooks; the codec decodes codebook 0
        # as the coarsest.
        codec = model.audio_encoder
        embeddings = codec.encoder(audio)  # [B, D, T]
        residual, codes = embeddings, []
        for layer in codec.quantizer.layers[: codec.quantizer.get_num_quantizers_for_bandwidth(p.bandwidth)]:
            index = layer.encode(residual)  # [B, T]
            residual = residual - layer.decode(index)
            codes.insert(0, index)
        return torch.stack(codes, dim=1)  # [B, K, T]

    p.encode = encode  # type: ignore[method-assign]


@fault("decode_codebooks_reversed", "silence", "the decoder receives the wrong codebook order", SECTION,
       ["tokens.codebook_order"], "audio.decoded", symptom="silent")
def _decode_codebooks_reversed(p: HFBedPipeline) -> None:
    decode = p.decode

    def decode_reverted(tokens: Any, model: Any = None) -> torch.Tensor:
        codes = torch.as_tensor(tokens, dtype=torch.long)
        # Bug: the codes are gathered per codebook with a loop written from the last codebook down
        # (`for k in reversed(range(K))`, to slice the delay pattern from its widest row) and
        # stacked in loop order: the codec gets codebook K-1 where codebook 0 belongs.
        rows = [codes[..., k, :] for k in reversed(range(codes.shape[-2]))]
        return decode(torch.stack(rows, dim=-2), model)

    p.decode = decode_reverted  # type: ignore[method-assign]


def _use_stereo_checkpoint(p: HFBedPipeline) -> None:
    """Switch the bed to its stereo checkpoint (interleaved codebooks), keeping the faults list."""
    from ..pipeline import HFBedPipeline

    faults = p.faults
    HFBedPipeline.__init__(p, replace(p.cfg, tiny=replace(p.cfg.tiny, audio_channels=2)))
    p.faults = faults


@fault("stereo_codes_concatenated", "silence", "the decoder receives the wrong codebook order (stereo)", SECTION,
       ["tokens.codebook_order"], "tokens", symptom="silent")
def _stereo_codes_concatenated(p: HFBedPipeline) -> None:
    # The run fine-tunes the stereo checkpoint (8 codebooks: left and right interleaved, L0 R0 L1 R1 ...).
    _use_stereo_checkpoint(p)

    @torch.no_grad()
    def encode(model: Any, audio: torch.Tensor) -> torch.Tensor:
        # Bug: the two channels are encoded apart and joined with `torch.cat([left, right], dim=1)`
        # (L0 L1 L2 L3 R0 R1 R2 R3) instead of interleaved: the decoder's codebook 1 (right, coarse)
        # is trained on the left channel's second codebook, and both channels share each other's
        # delays; generated stereo decodes to noise.
        codec = model.audio_encoder
        left = codec.encode(audio[:, :1], bandwidth=p.bandwidth).audio_codes[0]
        right = codec.encode(audio[:, 1:2], bandwidth=p.bandwidth).audio_codes[0]
        return torch.cat([left, right], dim=1)

    p.encode = encode  # type: ignore[method-assign]
