"""Codes to training labels the way Hugging Face MusicGen trains: the decoder's own delay pattern,
labels `[B, T', K]` with -100 where a position is ignored, and decoder inputs that the model makes
itself by shifting the labels right behind its start token.

    codes [B, K, T]  --BOS column, build_delay_pattern_mask-->  pattern [B, K, T + D]  (D = delays)
    drop the BOS column                                     ->  delayed [B, K, T + D - 1]
    pad id or a frame past the clip's valid length           ->  -100
    transpose                                                ->  labels  [B, T + D - 1, K]

Stereo checkpoints interleave the codebooks of the two channels (left 0, right 1, left 2, …), and
both channels of a pair share a delay.
"""

from __future__ import annotations

import torch

__all__ = ["delays", "delayed_codes", "model_delays", "labels_from_pattern", "interleave_channels", "split_channels"]


def delays(num_codebooks: int, audio_channels: int = 1) -> list[int]:
    """The delay of each codebook, in frames: k for mono, k // 2 for interleaved stereo."""
    return [k // audio_channels for k in range(num_codebooks)]


def delayed_codes(decoder: torch.nn.Module, codes: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """Codes `[B, K, T]` laid out in the decoder's delay pattern `[B, K, T + D - 1]`, with the pad id
    in the positions the pattern leaves empty (built by the decoder's own `build_delay_pattern_mask`)."""
    b, k, t = codes.shape
    channels = int(getattr(decoder.config, "audio_channels", 1) or 1)
    span = k // channels  # the largest delay + 1
    bos = torch.full((b, k, 1), pad_token_id, dtype=codes.dtype, device=codes.device)
    seq = torch.cat([bos, codes], dim=-1).reshape(b * k, t + 1)
    _, pattern = decoder.build_delay_pattern_mask(seq, pad_token_id=pad_token_id, max_length=t + span)
    return pattern.reshape(b, k, t + span)[..., 1:]  # the first column is the BOS row


def model_delays(decoder: torch.nn.Module, num_codebooks: int, pad_token_id: int) -> list[int] | None:
    """The delay of each codebook as the decoder itself lays codes out (the pattern `generate` uses),
    read off `build_delay_pattern_mask` on a probe; None when the decoder has no such method."""
    if not hasattr(decoder, "build_delay_pattern_mask"):
        return None
    probe = torch.full((1, num_codebooks, 4), pad_token_id + 1 if pad_token_id == 0 else 0, dtype=torch.long)
    with torch.no_grad():
        pattern = delayed_codes(decoder, probe, pad_token_id)[0]
    out = []
    for row in pattern:
        hit = (row != pad_token_id).nonzero()
        if hit.numel() == 0:
            return None
        out.append(int(hit[0]))
    return out


def labels_from_pattern(pattern: torch.Tensor, valid_frames: torch.Tensor, pad_token_id: int,
                        audio_channels: int = 1) -> torch.Tensor:
    """Labels `[B, T', K]`: the delayed codes, -100 on the pattern's pad positions and on every
    position whose frame lies past the clip's valid length (frame = position - the codebook's delay)."""
    b, k, tp = pattern.shape
    delay = torch.tensor(delays(k, audio_channels), device=pattern.device)[None, :, None]  # [1, K, 1]
    frame = torch.arange(tp, device=pattern.device)[None, None, :] - delay  # [1, K, T']
    keep = (pattern != pad_token_id) & (frame < valid_frames.to(pattern.device)[:, None, None])
    return torch.where(keep, pattern, torch.full_like(pattern, -100)).transpose(1, 2).contiguous()


def interleave_channels(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Codes of two channels `[B, K/2, T]` each as one stereo stream `[B, K, T]` (left first)."""
    b, k, t = left.shape
    return torch.stack([left, right], dim=2).reshape(b, 2 * k, t)


def split_channels(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `interleave_channels`: even codebooks are the left channel, odd the right."""
    return codes[:, 0::2], codes[:, 1::2]
