"""Repetitive generated music: the causes on the training side and on the generation side.

Training side: what the model is shown (duplicated, narrow or loop-dominated data, a tiny set seen
for many epochs, crops shorter than a bar) or what it can represent (no sense of position).
Generation side: the sampling settings and the stop condition of `generate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from ..data import Clip, clip_attributes, generate_clip
from ..generate import GenerationResult, SamplingConfig
from ..output import Tap, _no_tap
from ._registry import fault

if TYPE_CHECKING:
    from ..model import MusicLM
    from ..pipeline import Batch, ReferencePipeline

TRAINING = "repetition_training"
GENERATION = "repetition_generation"
SECTION = "Repetitive generated music"


# ---- training side: what the model is shown --------------------------------------------------

@fault("duplicated_clips", TRAINING, "duplicated data: the training set is many copies of a few clips",
       SECTION, ["loader.repeats"], "loader", symptom="repetitive")
def _duplicated_clips(p: ReferencePipeline) -> None:
    split_indices = p.split_indices
    shard = 8

    def duplicated(split: str) -> Sequence[int]:
        indices = split_indices(split)
        if split != "train":
            return indices
        # Bug: the training manifest is assembled shard by shard in a loop that reads shard 0's
        # file list every time (the loop variable is unused): 512 rows, 8 distinct clips.
        return [indices[i % shard] for i in range(len(indices))]

    p.split_indices = duplicated  # type: ignore[method-assign]


@fault("narrow_adaptation_set", TRAINING, "narrow adaptation data: fine-tuning on one instrument playing one figure",
       SECTION, ["generation.repetitive"], "loader", symptom="repetitive")
def _narrow_adaptation_set(p: ReferencePipeline) -> None:
    split_indices = p.split_indices
    chosen: list[int] = []

    def adaptation_set(split: str) -> Sequence[int]:
        if split != "train":
            return split_indices(split)
        if not chosen:
            # The adaptation set comes from the rest of the collection (past the validation
            # clips, so it does not leak), selected by a metadata query.
            index = p.cfg.train_size + p.cfg.valid_size
            while len(chosen) < p.cfg.train_size:
                a = clip_attributes(index)
                # Bug: the query meant "plucked strings or rising arpeggios" and was written with
                # `and`: every fine-tuning clip is the same instrument playing the same figure.
                if a["instrument"] == "plucked_string" and a["pattern"] == "rising_arpeggio":
                    chosen.append(index)
                index += 1
        return list(chosen)

    p.split_indices = adaptation_set  # type: ignore[method-assign]


@fault("small_set_overtrained", TRAINING, "excessive training on a small set: a few clips seen for hundreds of epochs",
       SECTION, ["generation.memorised", "loader.repeats"], "loader", symptom="repetitive")
def _small_set_overtrained(p: ReferencePipeline) -> None:
    # Bug: a debug subset (`train_size: 8`) stays in the config of a long run. With a batch of 8
    # every step is one full epoch of the same clips: the model memorises them and generation
    # replays them.
    p.cfg.train_size = 8


@fault("short_context_crops", TRAINING, "short contexts: crops shorter than one bar, so no phrase is ever seen whole",
       SECTION, ["generation.repetitive"], "crop", symptom="repetitive")
def _short_context_crops(p: ReferencePipeline) -> None:
    # Bug: the crop length is entered as 0.3 where the recipe said 3.0 (a misplaced decimal
    # point). 0.3 s is 15 codec frames, under one beat at any tempo (a beat is 0.375 s at
    # 160 bpm): the model never sees a bar, let alone a phrase, and only learns note-to-note loops.
    p.cfg.segment_seconds = 0.3


@fault(
    "positions_ignored",
    TRAINING,
    "weak structural supervision: the model gets no signal of where it is in the piece",
    SECTION,
    ["generation.repetitive"],
    "model",
    symptom="repetitive",
)
def _positions_ignored(p: ReferencePipeline) -> None:
    build_model = p.build_model

    def at_offset(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        # Bug: a refactor for incremental decoding looks positions up as `offset + arange(S)`
        # with the `arange` dropped; full-sequence passes have offset 0, so every step gets the
        # embedding of position 0. The model cannot tell the first beat of a bar from the third.
        (steps,) = args
        return (torch.zeros_like(steps),)

    def build(seed: int) -> MusicLM:
        model = build_model(seed)
        model.positions.register_forward_pre_hook(at_offset)  # a hook, so deepcopy keeps the bug
        return model

    p.build_model = build  # type: ignore[method-assign]


@fault(
    "ostinato_dominated_data",
    TRAINING,
    "a model that mainly learns common local loops: the data are mostly one loop",
    SECTION,
    ["generation.repetitive"],
    "loader",
    symptom="repetitive",
)
def _ostinato_dominated_data(p: ReferencePipeline) -> None:
    clip = p.clip
    cache: dict[tuple[int, int], Clip] = {}

    def loop_heavy(index: int, seed: int = 0) -> Clip:
        if index % 5 == 0:
            return clip(index, seed)
        key = (index, seed)
        if key not in cache:
            # Bug (in the data): the collection was scraped from loop libraries, so four clips
            # in five play the same repeated-note ostinato. The captions say so truthfully.
            cache[key] = generate_clip(index, seed, p.cfg.source_sample_rate,
                                       attributes={"pattern": "ostinato"})
        return cache[key]

    p.clip = loop_heavy  # type: ignore[method-assign]


# ---- generation side: sampling settings and the stop condition ---------------------------------

@fault("greedy_decoding", GENERATION, "greedy decoding: always the most likely token",
       SECTION, ["generation.greedy"], "generation", symptom="repetitive")
def _greedy_decoding(p: ReferencePipeline) -> None:
    # Bug: the evaluation preset sets `use_sampling: false` (argmax decoding), which for an
    # autoregressive music model locks onto a loop after a few frames.
    p.cfg.sampling["greedy"] = True


@fault("low_temperature", GENERATION, "low temperature: sampling collapses onto the top token",
       SECTION, ["generation.low_temperature"], "generation", symptom="repetitive")
def _low_temperature(p: ReferencePipeline) -> None:
    # Bug: "make it less noisy" turned into temperature 0.05, which is greedy in all but name.
    p.cfg.sampling["temperature"] = 0.05


@fault("top_k_restrictive", GENERATION, "restrictive top-k: only two candidate tokens per step",
       SECTION, ["generation.restrictive_sampling"], "generation", symptom="repetitive")
def _top_k_restrictive(p: ReferencePipeline) -> None:
    # Bug: top_k=2 copied from a small-vocabulary recipe (MusicGen samples with top_k=250).
    p.cfg.sampling["top_k"] = 2


@fault("top_p_restrictive", GENERATION, "restrictive top-p: the nucleus keeps only the top token",
       SECTION, ["generation.restrictive_sampling"], "generation", symptom="repetitive")
def _top_p_restrictive(p: ReferencePipeline) -> None:
    # Bug: top_p given as the mass to drop (0.05) instead of the mass to keep (0.95).
    p.cfg.sampling["top_p"] = 0.05


@fault("dominant_loop_prompt", GENERATION, "an overly dominant prefix: a looped prompt fills most of the output",
       SECTION, ["generation.dominant_prefix"], "generation", symptom="repetitive")
def _dominant_loop_prompt(p: ReferencePipeline) -> None:
    generate = p.generate
    loops: dict[tuple[int, int], torch.Tensor] = {}

    def looped_prompt(rows: int, max_frames: int) -> torch.Tensor:
        # Bug: the demo's continuation mode tiles a 0.32 s loop as the prompt and sets its length
        # to `0.9 * duration` (meant `0.1 *`): nine tenths of every output is the prompt's loop
        # and the model continues a sequence that is all repetition.
        frames = max(1, int(0.9 * max_frames))
        if (rows, frames) not in loops:
            loop_clip = generate_clip(0, 0, p.cfg.sample_rate, seconds=0.32,
                                      attributes={"pattern": "ostinato", "channels": 1, "drums": False})
            loop = torch.from_numpy(p.codec.encode(loop_clip.audio[None]))  # [1, K, L]
            reps = -(-frames // loop.shape[-1])
            loops[rows, frames] = loop.repeat(rows, 1, reps)[:, :, :frames].contiguous()
        return loops[rows, frames]

    def generate_with_prompt(model: MusicLM, batch: Batch, sampling: dict[str, Any] | SamplingConfig | None = None,
                             tap: Tap = _no_tap) -> GenerationResult:
        cfg = p.sampling_config(sampling, int(p.cfg.segment_seconds * p.codec.frame_rate))
        if cfg.prompt is None:
            cfg = replace(cfg, prompt=looped_prompt(len(batch), cfg.max_frames))
        return generate(model, batch, cfg, tap)

    p.generate = generate_with_prompt  # type: ignore[method-assign]


@fault("excessive_guidance", GENERATION, "excessive classifier-free guidance: cond - uncond amplified 30 times",
       SECTION, ["generation.excessive_guidance"], "generation", symptom="repetitive")
def _excessive_guidance(p: ReferencePipeline) -> None:
    # Bug: a guidance scale tuned for a diffusion model (30) is used for the token model (3).
    p.cfg.sampling["cfg_coef"] = 30.0


@fault("silence_stop_never_fires", GENERATION, "a stop condition that never activates",
       SECTION, ["generation.no_stop"], "generation", symptom="repetitive")
def _silence_stop_never_fires(p: ReferencePipeline) -> None:
    sampling_config = p.sampling_config

    def with_stop_in_samples(sampling: dict[str, Any] | SamplingConfig | None, frames: int) -> SamplingConfig:
        cfg = sampling_config(sampling, frames)
        if cfg.stop_after_silence_frames is None:
            return cfg
        # Bug: the stop length goes through the helper the crop code uses, which converts frames
        # to samples (x hop): 3 silent frames become 960, more than any generation has, so the
        # stop never fires and a collapsed output runs (silent or looping) to max_frames.
        return replace(cfg, stop_after_silence_frames=cfg.stop_after_silence_frames * p.codec.hop)

    p.sampling_config = with_stop_in_samples  # type: ignore[method-assign]
