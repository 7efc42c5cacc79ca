"""Plain records of what the conditioning experiments measured. Experiments fill them; checks judge them.

The condition is traced stage by stage, so each record holds one stage's observations:
`ConditionBatch` (caption, metadata, dropout, tokens, embedding of one batch), `ConditionData` (many
batches plus the words seen in training), `Sensitivity` (logits when the caption is swapped),
`ConditionGrads` (gradient reach into the conditioning path) and `GuidanceProbe` (generation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ConditionBatch", "ConditionData", "Sensitivity", "CondParam", "ConditionGrads", "GuidanceProbe"]


@dataclass
class ConditionBatch:
    """One batch seen up to its condition embedding (the model's outputs are never computed)."""

    source: str  # "golden" or "loader"
    captions: list[str]
    metadata: list[dict[str, Any]] | None = None
    dropped: np.ndarray | None = None  # [B] bool, the `condition.dropped` tap
    rate: float | None = None  # the configured dropout rate (tap meta `rate=`)
    ids: np.ndarray | None = None  # [B, L] int, `condition.tokens`
    mask: np.ndarray | None = None  # [B, L] bool, `condition.mask` (True = real token)
    max_len: int | None = None  # tap meta of `condition.tokens`
    embedding: np.ndarray | None = None  # [B, L, D] `condition.embedding` ([B, 1, D] for a pooled one)
    audio_features: np.ndarray | None = None  # [B, F] descriptors of the cropped audio (NaN rows: too short)
    token_features: np.ndarray | None = None  # [B, F] descriptors of the target tokens (NaN rows: empty)


@dataclass
class ConditionData:
    batches: list[ConditionBatch]
    training_captions: list[str] = field(default_factory=list)  # what the model trains on
    training_source: str = ""  # where training_captions came from ("loader", "training_examples()")
    prompts: list[str] = field(default_factory=list)  # the evaluation prompts (the golden captions)

    @property
    def captions(self) -> list[str]:
        return [c for b in self.batches for c in b.captions]


@dataclass
class Sensitivity:
    """How much the condition embedding and the logits move when the caption is replaced.

    Changes are relative: embedding |ΔE| / |E| per row, logits mean |ΔL| / std(L) per row, over the
    rows whose caption really changed and that condition dropout did not already empty.
    """

    rows: int
    embedding_change: dict[str, float]  # "other caption" / "null caption" -> largest row change
    logits_change: dict[str, float]
    error: str | None = None
    steps: int = 0  # updates on the golden batch before measuring (0: a fresh model)
    # The baseline from the pipeline itself: the same change measured when the captions are set again
    # unchanged (run-to-run noise; NaN when not measured), and the logits' dtype precision.
    control: float = float("nan")
    eps: float = 1.1920929e-07  # float32's
    # Per alternative: mean total-variation distance between the predicted distributions per position,
    # the chance that one sampled token differs under the same random draw; and how many positions
    # one example predicts (K x T), for what generation can be expected to show.
    tv: dict[str, float] = field(default_factory=dict)
    positions: int = 0
    # The run's logits are low precision (bf16/fp16): the measurement was repeated with every low-precision
    # cast turned into float32 (the same ops), since rounding at 8 bf16 eps hides a fresh model's response.
    upcast_from: str | None = None

    @property
    def floor(self) -> float:
        """A relative logit change at or below this is no response: float rounding of the logits' dtype
        (8 eps), or ten times what the same captions move them by run to run, whichever is larger."""
        noise = self.control if self.control == self.control else 0.0  # NaN-safe
        return max(8.0 * self.eps, 10.0 * noise)


@dataclass
class CondParam:
    name: str
    numel: int
    requires_grad: bool
    ndim: int
    grad: str  # "ok", "zero", "none" (no gradient reached it) or "frozen"
    constant: bool  # a 1-D tensor whose values are all equal: a bias or norm gain never trained


@dataclass
class ConditionGrads:
    params: list[CondParam]
    loss_has_graph: bool
    embedding_requires_grad: bool | None  # None: the pipeline does not tap `condition.embedding`
    embedding_grad: str  # "ok", "zero", "none", or "n/a"


@dataclass
class GuidanceProbe:
    """Generated tokens for the same batch and sampling seed with different captions.

    `changed[x]` is the share of generated tokens that differ from those of the true captions when
    the captions are replaced by x; "null (guidance 1)" repeats the null comparison with guidance
    forced to 1 (conditional logits only), to tell a cancelling guidance from a dropped caption.
    """

    tokens: int
    changed: dict[str, float]
    override_error: str | None = None
    error: str | None = None
    compared: str = "codes"  # "codes", or "audio" where generate returns audio only
    sampled: int | None = None  # tokens the sampler drew (rows x codebooks x frames), when known


@dataclass
class DeclaredGuidance:
    """The guidance coefficient the pipeline's own `generate` applies with its default sampling, as it
    reports it (`sampling=` on `generation.tokens`; AudioCraft's `cfg_coef`, HF's `guidance_scale`).
    None: not reported."""

    cfg_coef: float | None
    error: str | None = None
