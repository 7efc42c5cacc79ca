"""The output route of the reference pipeline: generate codes, decode, normalise, write, read back.

Silence and scale bugs live here as often as in the model, so every hop is tapped:
`generation.tokens` → `audio.decoded` → (peak normalisation, int16 WAV) → `audio.written`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

from .generate import GenerationResult, SamplingConfig, generate

__all__ = ["OutputRoute", "Tap", "_no_tap"]

Tap = Callable[..., Any]
PEAK_HEADROOM_DB = 1.0  # peak normalisation target: -1 dBFS, as AudioCraft's audio_write does


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


class OutputRoute:
    """Mixed into `ReferencePipeline`: needs `cfg`, `codec`, `tokenizer`."""

    cfg: Any
    codec: Any
    tokenizer: Any

    def decode(self, tokens: Any) -> torch.Tensor:
        codes = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
        return torch.from_numpy(self.codec.decode(codes))  # [B, 1, F * hop]

    def sampling_config(self, sampling: dict[str, Any] | SamplingConfig | None, frames: int) -> SamplingConfig:
        if isinstance(sampling, SamplingConfig):
            return sampling
        params = {**self.cfg.sampling, **(sampling or {})}
        params.setdefault("max_frames", frames)
        if "prompt" in params and params["prompt"] is not None and not isinstance(params["prompt"], torch.Tensor):
            params["prompt"] = torch.as_tensor(np.asarray(params["prompt"]), dtype=torch.long)
        return SamplingConfig(**params)

    def generate(self, model: Any, batch: Any, sampling: dict[str, Any] | SamplingConfig | None = None,
                 tap: Tap = _no_tap) -> GenerationResult:
        """Sample codes for the batch's captions; `sampling` overrides the configured settings."""
        frames = int(self.cfg.segment_seconds * self.codec.frame_rate)
        cfg = self.sampling_config(sampling, frames)
        if tap is not _no_tap and not cfg.keep_logits:  # someone is watching: keep what the sampler saw for the taps
            cfg = dataclasses.replace(cfg, keep_logits=True)
        ids, mask = self.tokenizer.encode(list(batch.captions))
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                cond, cond_mask = model.encode_condition(ids, mask)
                result = self.sample_codes(model, cond, cond_mask, cfg)
        finally:
            model.train(was_training)
        # What a user's generate can log too: the settings it actually used and what the sampler saw.
        used = {"greedy": cfg.greedy, "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "cfg_coef": cfg.cfg_coef, "max_frames": cfg.max_frames,
                "stop_after_silence_frames": cfg.stop_after_silence_frames}
        tap("generation.tokens", result.codes, cardinality=self.codec.cardinality,
            frames_generated=result.frames_generated, stopped=result.stopped,
            prompt_frames=result.prompt_frames, sampling=used)
        for stage, logits in (("generation.logits", result.logits), ("generation.logits.cond", result.cond_logits),
                              ("generation.logits.uncond", result.uncond_logits)):
            if logits is not None:
                tap(stage, logits)  # [B, K, T, C], NaN where nothing was sampled
        return result

    def sample_codes(self, model: Any, cond: torch.Tensor, cond_mask: torch.Tensor,
                     cfg: SamplingConfig) -> GenerationResult:
        """The sampling loop itself (a stage of its own so that a buggy sampler can replace it)."""
        return generate(model, cond, cond_mask, cfg)

    def normalize_output(self, audio: np.ndarray) -> np.ndarray:
        """Peak-normalise one example `[C, T]` to -1 dBFS (digital silence stays silent)."""
        peak = float(np.abs(audio).max()) if audio.size else 0.0
        if peak == 0.0:
            return audio
        return audio * (10 ** (-PEAK_HEADROOM_DB / 20) / peak)

    def write_output(self, audio: np.ndarray, folder: str | Path) -> list[Path]:
        """Write each example `[B, C, T]` as a 16-bit WAV at the model's rate."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, x in enumerate(np.asarray(audio, dtype=np.float32)):
            y = self.normalize_output(x)
            path = folder / f"sample_{i:02d}.wav"
            sf.write(str(path), y.T, self.cfg.sample_rate, subtype="PCM_16")
            paths.append(path)
        return paths

    def read_back(self, paths: list[Path]) -> tuple[np.ndarray, int, str]:
        """Read written files back as a player would: `[B, C, T]`, the header's rate and subtype."""
        arrays, rates, subtypes = [], [], []
        for path in paths:
            data, sr = sf.read(str(path), dtype="float32", always_2d=True)
            arrays.append(data.T)
            rates.append(sr)
            subtypes.append(sf.info(str(path)).subtype)
        length = max(a.shape[-1] for a in arrays)
        out = np.zeros((len(arrays), arrays[0].shape[0], length), dtype=np.float32)
        for i, a in enumerate(arrays):
            out[i, :, : a.shape[-1]] = a
        return out, rates[0], subtypes[0]

    def render(self, model: Any, batch: Any, folder: str | Path, sampling: dict[str, Any] | None = None,
               tap: Tap = _no_tap) -> list[Path]:
        """Generate, decode, write and read back the batch's captions: the whole output route."""
        result = self.generate(model, batch, sampling, tap)
        audio = self.decode(result.codes)
        tap("audio.decoded", audio, sample_rate=self.cfg.sample_rate)
        paths = self.write_output(audio.numpy(), folder)
        written, rate, subtype = self.read_back(paths)
        tap("audio.written", written, sample_rate=rate, subtype=subtype, files=[str(p) for p in paths])
        return paths
