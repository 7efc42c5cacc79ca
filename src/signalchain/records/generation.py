"""Plain records of what the generation experiments measured. Experiments fill them; checks judge them.

They live with the checks (layer 3, judge side) so that checks never import experiments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .symbolic import EosProbe, EosStats

__all__ = ["TokenStats", "SamplerFit", "GenerationRun", "StopProbe", "PositionProbe", "DataVariety",
           "Checkpoint", "NearestExample", "GenerationMeasurement"]


@dataclass
class TokenStats:
    """Repetition and diversity of token sequences [B, K, T] (see experiments.generation.metrics)."""

    rows: int
    frames: int
    entropy: list[float]  # per codebook, pooled over rows (nats)
    ngram_repetition: float  # share of 4-frame phrases that are repeats of an earlier one
    longest_repeat: float  # longest span occurring twice, as a share of the frames
    same_as_previous: float  # share of frames equal to the previous frame
    loop_period: int  # frames; 0 when no lag >= 2 repeats
    loop_strength: float  # share of frames equal to the frame one period earlier
    loop_seconds: float | None = None
    distinct_frames: int = 0
    within_entropy: float = 0.0  # mean per-row, per-codebook entropy (nats)


@dataclass
class SamplerFit:
    """How the sampler picked tokens from the logits it was given (experiments.generation.metrics.sampler_fit)."""

    n: int
    top1: float = 0.0  # share of picks that were the top token
    top1_expected: float = 0.0  # what faithful sampling (temperature 1) would give
    entropy: float = 0.0  # mean entropy of the sampler's distribution at temperature 1 (nats)
    surprisal: float = 0.0  # mean -log p of the picks at temperature 1 (≈ entropy when faithful)
    max_rank: int = 0
    temperature: float | None = None  # effective temperature fitted within the picked ranks
    beyond_rank_expected: float | None = None  # picks past max_rank a softmax would have made
    max_mass_before: float | None = None
    beyond_mass_expected: float | None = None  # picks past that nucleus mass a softmax would have made
    support: float = 1.0  # mean share of the vocabulary within 50 nats of the best token (not ruled out)


@dataclass
class GenerationRun:
    """One call of `generate` on the prompts: what was asked, what came out, how it was sampled."""

    label: str
    overrides: dict[str, Any]
    seed: int
    stats: TokenStats | None = None
    fit: SamplerFit | None = None
    guidance: float | None = None  # estimated c of uncond + c (cond - uncond), when both were tapped
    sampled_share: float | None = None  # share of output positions the sampler chose (rest: prompt, padding)
    frames_generated: int | None = None
    stopped: bool | None = None
    prompt_frames: int | None = None
    reported: dict[str, Any] = field(default_factory=dict)  # the settings the pipeline says it used
    cardinality: int | None = None
    invalid: int = 0  # tokens outside [0, cardinality)
    error: str | None = None
    # The first prompt's audio, decoded: mean cosine similarity of its spectral frames (high for static
    # or looping sound) and the strongest frame-autocorrelation lag (experiments.generation.metrics.audio_loop)
    audio_loop: dict[str, float] | None = None
    # generate returned audio only (HF's model.generate): what came back ("audio [2, 1, 16000]"); the
    # token measures (stats, fit, invalid tokens) are then None and only `audio_loop` is measured
    audio_only: str | None = None
    eos: EosStats | None = None  # symbolic ids with an EOS id: what the run did with it


@dataclass
class StopProbe:
    """Greedy generation told to stop at a frame it is known to produce (`pattern_frame`)."""

    frames: int
    pattern_frame: int  # first frame of the free run equal to the stop pattern
    stop_after: int
    frames_generated: int | None
    stopped: bool | None
    continued: bool  # the output after the pattern is not the stop pattern (it kept generating)
    error: str | None = None


@dataclass
class PositionProbe:
    """Index lookups of the model's embedding tables during one step."""

    lookups: list[dict[str, Any]]  # {module, rows, length, distinct, constant}
    error: str | None = None


@dataclass
class DataVariety:
    """What the training loader shows the model, judged for repetition-prone data."""

    examples: int
    crop_seconds: float | None
    clip_seconds: list[float]  # valid length of each clip before the crop
    within_entropy: list[float]  # per example, coarse-codebook token entropy (nats)
    profile_similarity: float | None  # mean pairwise correlation of examples' spectral profiles
    caption_overlap: float | None  # mean pairwise word Jaccard of captions
    valid_profile_similarity: float | None = None  # the same on validation batches, when available
    distinct_examples: int = 0
    error: str | None = None
    # median profile distance between examples over that between the two halves of one example
    # (about 1: the examples are as alike as parts of one example)
    alike_ratio: float | None = None


@dataclass
class Checkpoint:
    """The model after `step` updates: teacher-forced entropy and free-running output."""

    step: int
    teacher_forced_entropy: float | None
    teacher_forced_loss: float | None
    runs: list[GenerationRun] = field(default_factory=list)


@dataclass
class NearestExample:
    sample: int  # generated row
    example: str  # training example's label (caption or index)
    similarity: float
    audio_similarity_second: float | None = None  # the next-nearest example, for contrast


@dataclass
class GenerationMeasurement:
    frames: int
    prompts: int
    frame_rate: float | None
    runs: list[GenerationRun]
    configured: str = "configured"
    seed_agreement: float | None = None  # share of equal tokens, configured run vs the next seed
    leading_agreement: float | None = None  # share of leading frames equal in both seeds (a fixed prefix)
    stop: StopProbe | None = None
    position: PositionProbe | None = None
    data: DataVariety | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    nearest: list[NearestExample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    eos: EosProbe | None = None  # symbolic: the run to the golden length when the configured one cannot stop
    symbolic: bool = False  # symbolic ids (one stream of tokens, not codec frames): findings speak of tokens

    def run(self, label: str) -> GenerationRun | None:
        return next((r for r in self.runs if r.label == label), None)
