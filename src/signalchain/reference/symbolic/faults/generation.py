"""Repetitive generated music from the sampler's side: argmax decoding, a near-zero temperature, and a
sampler that only ever shows the model its last few tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..model import SymbolicLM
    from ..pipeline import SymbolicBedPipeline

GENERATION = "repetition_generation"
SECTION = "Repetitive generated music"


@fault("greedy_eval_preset", GENERATION, "greedy decoding: always the most likely token", SECTION,
       ["generation.greedy"], "generation", symptom="repetitive")
def _greedy_eval_preset(p: SymbolicBedPipeline) -> None:
    # Bug: the evaluation preset was made for the loss ("deterministic, reproducible samples") and
    # sets `greedy: true`: argmax decoding of a music LM settles on one bar and plays it again.
    p.sampling = {**p.sampling, "greedy": True}


@fault("temperature_for_less_noise", GENERATION, "low temperature: sampling collapses onto the top token", SECTION,
       ["generation.low_temperature", "generation.greedy"], "generation", symptom="repetitive")
def _temperature_for_less_noise(p: SymbolicBedPipeline) -> None:
    # Bug: "the samples sound too random" became `temperature: 0.05`, greedy in all but name.
    p.sampling = {**p.sampling, "temperature": 0.05}


@fault("top_k_from_small_vocabulary", GENERATION, "restrictive top-k: only two candidate tokens per step", SECTION,
       ["generation.restrictive_sampling"], "generation", symptom="repetitive")
def _top_k_from_small_vocabulary(p: SymbolicBedPipeline) -> None:
    # Bug: `top_k: 2` comes from a chord-symbol model's sampler (a vocabulary of a few dozen
    # tokens); over REMI's ~370 tokens it leaves the two likeliest at every step.
    p.sampling = {**p.sampling, "top_k": 2}


@fault("guidance_scale_from_diffusion", GENERATION, "excessive classifier-free guidance", SECTION,
       ["generation.excessive_guidance"], "generation", symptom="repetitive")
def _guidance_scale_from_diffusion(p: SymbolicBedPipeline) -> None:
    # Bug: the guidance scale of an image diffusion recipe (30) is used for the token model (3):
    # cond - uncond amplified thirty times leaves a few tokens with all the mass.
    p.sampling = {**p.sampling, "cfg_coef": 30.0}


@fault("sampler_context_window", GENERATION, "a sampler that feeds back a fixed window of its own output", SECTION,
       ["symbolic.repetitive", "generation.repetitive"], "generation", symptom="repetitive")
def _sampler_context_window(p: SymbolicBedPipeline) -> None:
    window = 12

    def edit(model: SymbolicLM) -> None:
        forward = model.forward

        def windowed(ids: torch.Tensor, padding: Any, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
            # Bug: the incremental decoding helper crops the context to the streaming demo's
            # `context_window` (12 tokens, about one note's worth of REMI tokens per 3 tokens) before
            # every forward without padding (generation): the model never sees more than the notes it
            # just played, its positions restart at 0, and it plays them again.
            if padding is None and ids.shape[1] > window:
                ids = ids[:, -window:]
            return forward(ids, padding, memory, memory_mask)

        model.forward = windowed  # type: ignore[method-assign]

    patch_model(p, edit)


@fault("special_token_mask_covers_eos", GENERATION, "a sampler that can never emit EOS: generation never stops",
       SECTION, ["generation.no_stop"], "generation", symptom="repetitive")
def _special_token_mask_covers_eos(p: SymbolicBedPipeline) -> None:
    specials = len(p.tokenizer.special_tokens)  # PAD, BOS, EOS: ids 0, 1, 2

    def edit(model: SymbolicLM) -> None:
        forward = model.forward

        def no_specials(ids: torch.Tensor, padding: Any, memory: torch.Tensor,
                        memory_mask: torch.Tensor) -> torch.Tensor:
            logits = forward(ids, padding, memory, memory_mask)
            if padding is None:  # generation
                # Bug: "the sampler must never write PAD or BOS in the middle of a piece" became
                # `logits[..., :len(tokenizer.special_tokens)] = finfo.min`; the special tokens are PAD,
                # BOS and EOS, so EOS (id 2) is masked too: no piece ever ends, every sample runs to
                # max_frames and the decoded music trails off into whatever the model plays next.
                logits = logits.clone()
                logits[..., :specials] = torch.finfo(logits.dtype).min
            return logits

        model.forward = no_specials  # type: ignore[method-assign]

    patch_model(p, edit)
