"""Sampling-based generation for the reference model, the way MusicGen generates.

The model runs autoregressively over the delay pattern (T + K - 1 steps for T frames). At each step
all K codebooks are sampled at once; positions outside the pattern get the special token, positions
covered by an audio prompt keep the prompt's codes. Classifier-free guidance runs the conditional
rows and null-condition rows (all-False mask) in one batch and mixes their logits:
    logits = uncond + cfg_coef * (cond - uncond)
A step runs the decoder over the new position only, against a key/value cache of the earlier ones
(`incremental.py`); a model the cache cannot reproduce (a patched forward, a hook, a wrapper) re-runs
the whole prefix each step instead, as does `use_cache=False`. Both give the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .incremental import KVCache, cache_applies, forward_cached
from .model import MusicLM
from .pattern import build_delay_pattern, pattern_valid_mask, revert_delay_pattern


@dataclass
class SamplingConfig:
    greedy: bool = False
    temperature: float = 1.0  # 0 behaves as greedy
    top_k: int = 0  # 0 = off
    top_p: float = 0.0  # 0 = off; else keep the smallest set of tokens whose mass reaches top_p
    cfg_coef: float = 3.0  # 1.0 = no guidance (the null-condition pass is skipped)
    max_frames: int = 150
    prompt: Tensor | None = None  # [B, K, P] audio prompt codes to continue, kept verbatim
    stop_after_silence_frames: int | None = None  # stop once every row ends in this many ...
    silence_codes: Tensor | None = None  # [K] ... frames equal to these codes
    seed: int = 0
    keep_logits: bool = False  # also return what the sampler saw ([B, K, T, C] per pass): for diagnosis only

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 <= self.top_p <= 1.0:
            raise ValueError(f"top_p must be in [0, 1] (0 = off), got {self.top_p}")
        if self.max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {self.max_frames}")
        if (self.stop_after_silence_frames is None) != (self.silence_codes is None):
            raise ValueError(
                "stop_after_silence_frames and silence_codes go together: set both or neither, got "
                f"stop_after_silence_frames={self.stop_after_silence_frames}, "
                f"silence_codes={self.silence_codes}"
            )
        if self.stop_after_silence_frames is not None and self.stop_after_silence_frames < 1:
            raise ValueError(
                f"stop_after_silence_frames must be >= 1, got {self.stop_after_silence_frames}"
            )


@dataclass
class GenerationResult:
    codes: Tensor  # [B, K, max_frames]; frames from frames_generated on are silence_codes padding
    frames_generated: int  # valid leading frames of codes, the prompt included
    stopped: bool  # True when the silence stop condition ended generation early
    prompt_frames: int = 0
    # What the sampler saw, frame-aligned like `codes` ([B, K, T, C], NaN where nothing was sampled:
    # prompt frames and frames after a stop): the logits it sampled from (after guidance) and, when
    # guided, the conditional and null-condition logits they were mixed from. Kept for diagnosis.
    logits: Tensor | None = None
    cond_logits: Tensor | None = None
    uncond_logits: Tensor | None = None


def sample_next(
    logits: Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None
) -> Tensor:
    """logits [N, C] -> token ids [N]: greedy, or temperature / top-k / top-p sampling."""
    if cfg.greedy or cfg.temperature == 0:
        return logits.argmax(dim=-1)
    if generator is None:
        generator = torch.Generator(device=logits.device).manual_seed(cfg.seed)
    # Subtract the max first: the best token scores exactly 0 at any temperature, so a tiny
    # temperature sends the others to -inf instead of making inf - inf = NaN.
    scores = (logits.float() - logits.float().amax(dim=-1, keepdim=True)) / cfg.temperature
    if 0 < cfg.top_k < scores.shape[-1]:
        kth = scores.topk(cfg.top_k, dim=-1).values[:, -1:]  # [N, 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if 0 < cfg.top_p < 1:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of the strictly better tokens
        drop_sorted = mass_before > cfg.top_p  # the best token (mass_before 0) is always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    probs = scores.softmax(dim=-1)  # [N, C]
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: MusicLM, cond: Tensor, cond_mask: Tensor, cfg: SamplingConfig, *, use_cache: bool | None = None
) -> GenerationResult:
    """cond [B, L, D], cond_mask [B, L] (from model.encode_condition) -> GenerationResult.

    use_cache: None (the default) decodes incrementally with a key/value cache where
    `cache_applies(model)`, else re-runs the prefix each step; False always re-runs the prefix;
    True requires the cache (ValueError on a model it cannot reproduce).
    """
    K, C = model.config.n_codebooks, model.config.cardinality
    special = model.special_token
    B, T, device = cond.shape[0], cfg.max_frames, cond.device
    S = T + K - 1  # pattern steps
    if S > model.config.max_steps:
        raise ValueError(
            f"max_frames={T} needs {S} pattern steps but the model has "
            f"max_steps={model.config.max_steps}; lower max_frames"
        )
    prompt = _check_prompt(cfg.prompt, B, K, C, T, device)
    P = 0 if prompt is None else prompt.shape[-1]
    silence = _check_silence(cfg.silence_codes, K, C, device)

    pattern = torch.full((B, K, S), special, dtype=torch.long, device=device)
    known = torch.zeros(K, S, dtype=torch.bool, device=device)  # positions forced by the prompt
    if prompt is not None:
        pattern[:, :, : P + K - 1] = build_delay_pattern(prompt, special)
        known[:, : P + K - 1] = pattern_valid_mask(K, P, device=device)
    to_sample = pattern_valid_mask(K, T, device=device) & ~known  # [K, S]

    guided = cfg.cfg_coef != 1.0
    if guided:  # rows [0, B) conditional, [B, 2B) null condition
        cond = torch.cat([cond, torch.zeros_like(cond)], dim=0)
        cond_mask = torch.cat([cond_mask.bool(), torch.zeros_like(cond_mask, dtype=torch.bool)])
    start = torch.full((cond.shape[0], K, 1), special, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    silent_run = torch.zeros(B, dtype=torch.long, device=device)  # trailing silent frames per row
    frames, stopped = T, False
    codebooks = torch.arange(K, device=device)
    seen = (torch.full((3 if guided else 1, B, K, S, C), float("nan"), device=device)  # sampler's logits per step
            if cfg.keep_logits else None)

    cached = use_cache is not False and cache_applies(model)
    if use_cache and not cached:
        raise ValueError("use_cache=True but the model is not a plain MusicLM (a patched forward, a hook or a "
                         "wrapper): the key/value cache would bypass it")
    was_training = model.training
    model.eval()
    try:
        cache = KVCache(model, cond, cond_mask, S) if cached else None
        for s in range(P, S):  # steps before P hold only prompt codes and specials
            if not bool(to_sample[:, s].any()):
                continue
            if cache is None:
                prefix = pattern[:, :, :s].repeat(2, 1, 1) if guided else pattern[:, :, :s]
                inputs = torch.cat([start, prefix], dim=2)  # [B', K, s + 1]; the last step predicts s
                logits = model(inputs, cond, cond_mask)[:, :, -1]  # [B', K, C]
            else:  # the inputs at positions cache.length .. s (input j is pattern step j - 1)
                new = pattern[:, :, max(cache.length - 1, 0) : s]
                new = new.repeat(2, 1, 1) if guided else new
                if cache.length == 0:
                    new = torch.cat([start, new], dim=2)
                logits = forward_cached(model, new, cache)[:, :, -1]  # [B', K, C]
            if guided:
                cond_logits, uncond_logits = logits.chunk(2, dim=0)
                logits = uncond_logits + cfg.cfg_coef * (cond_logits - uncond_logits)
                if seen is not None:
                    seen[1:, :, :, s] = torch.stack([cond_logits, uncond_logits]).float()
            if seen is not None:
                seen[0, :, :, s] = logits.float()
            tokens = sample_next(logits.reshape(B * K, C), cfg, generator).view(B, K)
            write = to_sample[:, s]  # [K]
            pattern[:, write, s] = tokens[:, write]

            t = s - (K - 1)  # frame t is complete once its last codebook is written
            if silence is not None and t >= P:
                frame = pattern[:, codebooks, t + codebooks]  # [B, K]
                is_silent = (frame == silence).all(dim=1)  # [B]
                silent_run = torch.where(is_silent, silent_run + 1, 0)
                if bool((silent_run >= cfg.stop_after_silence_frames).all()):
                    frames, stopped = t + 1, True
                    break
    finally:
        model.train(was_training)

    codes = revert_delay_pattern(pattern).clone()  # [B, K, T]
    if stopped:  # later frames are partly sampled (finer codebooks lag); replace them all
        codes[:, :, frames:] = silence.view(1, K, 1)
    result = GenerationResult(codes=codes, frames_generated=frames, stopped=stopped, prompt_frames=P)
    if seen is not None:
        seen[:, :, ~to_sample] = float("nan")  # [K, S] mask over dims 2, 3: specials and prompt codes were not sampled
        frame_logits = revert_delay_pattern(seen.flatten(0, 1)).unflatten(0, (seen.shape[0], B)).clone()
        # frame_logits: [*, B, K, T, C]
        if stopped:
            frame_logits[:, :, :, frames:] = float("nan")
        result.logits = frame_logits[0]
        if guided:
            result.cond_logits, result.uncond_logits = frame_logits[1], frame_logits[2]
    return result


def _check_prompt(
    prompt: Tensor | None, B: int, K: int, C: int, T: int, device: torch.device
) -> Tensor | None:
    if prompt is None:
        return None
    if prompt.dim() != 3 or prompt.shape[:2] != (B, K) or prompt.shape[2] > T:
        raise ValueError(
            f"prompt must be [B={B}, K={K}, P <= max_frames={T}], got shape {tuple(prompt.shape)}"
        )
    if prompt.numel() and (int(prompt.min()) < 0 or int(prompt.max()) >= C):
        raise ValueError(f"prompt codes must be in [0, {C}), got [{prompt.min()}, {prompt.max()}]")
    return prompt.to(device=device, dtype=torch.long)


def _check_silence(codes: Tensor | None, K: int, C: int, device: torch.device) -> Tensor | None:
    if codes is None:
        return None
    codes = torch.as_tensor(codes, dtype=torch.long, device=device)
    if codes.shape != (K,) or int(codes.min()) < 0 or int(codes.max()) >= C:
        raise ValueError(f"silence_codes must be [K={K}] codes in [0, {C}), got {codes.tolist()}")
    return codes
