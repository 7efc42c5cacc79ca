"""Generation and decoding the HF way: `model.generate` returns audio, so the codes its codec
decodes are kept beside it; `decode(tokens, model)` uses the model's own codec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .labels import interleave_channels, split_channels

__all__ = ["HFGeneration"]

Tap = Callable[..., Any]
#: signalchain's sampling keys (AudioCraft's names) and HF generate's.
_SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "cfg_coef": "guidance_scale"}


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


class HFGeneration:
    """Mixed into `HFMusicgenPipeline`: needs `guidance_scale`, `num_codebooks`, `audio_channels`,
    `segment_seconds`, `frame_rate`, `codec_rate`, `cardinality`, `tokenize`, `build_model`."""

    guidance_scale: float
    num_codebooks: int
    audio_channels: int
    segment_seconds: float
    frame_rate: float
    codec_rate: int
    cardinality: int
    _last_model: Any

    # ---- generation and decoding ---------------------------------------------------------------

    def generation_kwargs(self, sampling: dict[str, Any] | None, frames: int) -> dict[str, Any]:
        s = dict(sampling or {})
        unknown = set(s) - set(_SAMPLING) - {"greedy", "max_frames", "seed"}
        if unknown:  # an audio prompt, a silence stop…: HF's generate has no such setting here
            raise ValueError(f"HF MusicGen generate does not take {sorted(unknown)}")
        kw: dict[str, Any] = {"do_sample": not s.get("greedy", False), "guidance_scale": self.guidance_scale}
        for ours, theirs in _SAMPLING.items():
            if s.get(ours) is not None:
                kw[theirs] = s[ours]
        span = self.num_codebooks // self.audio_channels
        kw["max_new_tokens"] = int(s.get("max_frames") or frames) + span - 1
        return kw

    def generate(self, model: Any, batch: Any, sampling: dict[str, Any] | None = None,
                 tap: Tap = _no_tap) -> dict[str, Any]:
        """HF's generate returns audio; the codes its codec decodes are kept beside it."""
        kw = self.generation_kwargs(sampling, frames=int(round(self.segment_seconds * self.frame_rate)))
        ids, mask = self.tokenize([e.caption for e in batch.examples])
        codec = model.audio_encoder
        seen: list[torch.Tensor] = []
        original = codec.decode

        def keep_codes(audio_codes: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            seen.append(audio_codes[0].detach().clone())
            return original(audio_codes, *args, **kwargs)

        if (sampling or {}).get("seed") is not None:
            torch.manual_seed(int(sampling["seed"]))
        codec.decode = keep_codes
        try:
            model.eval()
            with torch.no_grad():
                audio = model.generate(input_ids=ids, attention_mask=mask, **kw)
        finally:
            del codec.decode
        codes = interleave_channels(*seen) if len(seen) == 2 else seen[0]
        # The settings generate really used, in signalchain's names (the pipeline's guidance included).
        effective = {**dict(sampling or {}), "greedy": not kw["do_sample"], "cfg_coef": kw["guidance_scale"]}
        effective.update({ours: kw[theirs] for ours, theirs in _SAMPLING.items() if theirs in kw})
        tap("generation.tokens", codes, frames_generated=int(codes.shape[-1]), sampling=effective,
            cardinality=self.cardinality)
        return {"tokens": codes, "audio": audio, "sample_rate": self.codec_rate}

    @torch.no_grad()
    def decode(self, tokens: Any, model: Any = None) -> torch.Tensor:
        """Codes `[B, K, T]` to audio `[B, C, S]` with the model's own codec."""
        model = model if model is not None else self._last_model or self.build_model(0)
        codes = torch.as_tensor(tokens, dtype=torch.long)
        codec = model.audio_encoder
        if self.audio_channels == 2:
            left, right = split_channels(codes)
            return torch.cat([codec.decode(left[None], [None]).audio_values,
                              codec.decode(right[None], [None]).audio_values], dim=1)
        return codec.decode(codes[None], [None]).audio_values
