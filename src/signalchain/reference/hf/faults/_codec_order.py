"""Codebook-order faults that the HF bed does not score (not imported by the catalogue).

They need a codec whose decoder reconstructs its input: the tiny bed's Encodec is freshly
initialised (its decoder ignores the codes), so every detector that listens to decoded tokens
correctly says it cannot judge there. On a trained codec (a real MusicGen checkpoint through the
integration) they are found by `tokens.codebook_order`. `UNSCORED[name].apply(pipeline)` injects one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from ...faults._registry import Fault

#: name -> Fault, kept apart from the scored catalogue.
UNSCORED: dict[str, Fault] = {}


def fault(name, family, cause, section, ids, stage, symptom=None):
    def deco(fn):
        UNSCORED[name] = Fault(name, family, cause, section, tuple(ids), stage, fn, symptom)
        return fn

    return deco

if TYPE_CHECKING:

    from ..pipeline import HFBedPipeline


SECTION = "Silent or nearly silent output"


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
