"""Settings of the reference pipeline. Everything a run depends on is here, so it can be hashed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RefConfig"]


@dataclass
class RefConfig:
    # data
    source_sample_rate: int = 32000  # the rate clips are stored at
    sample_rate: int = 16000  # the model's (and codec's) rate
    batch_size: int = 8
    segment_seconds: float = 2.0  # crop length; shorter clips are zero-padded and masked
    train_size: int = 512  # clips in the training split (for loaders and memorisation checks)
    valid_size: int = 64
    # text condition
    text_max_len: int = 24
    cond_dropout: float = 0.1  # classifier-free guidance: share of captions replaced by the null condition
    # model
    dim: int = 128
    heads: int = 4
    layers: int = 2
    ffn_mult: int = 4
    dropout: float = 0.0
    # optimisation
    lr: float = 2e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    warmup_steps: int = 10
    clip_grad: float = 1.0
    amp: str | None = None  # None, "bf16" (autocast on CPU) or "fp16" (with a GradScaler)
    # compilation: the torch.compile backend of the model ("eager", "aot_eager", "inductor"); None: not compiled
    compile: str | None = None
    compile_dynamic: bool | None = None  # torch.compile(dynamic=...); None: dynamo's automatic dynamic shapes
    # generation
    sampling: dict[str, Any] = field(default_factory=lambda: {
        "temperature": 1.0, "top_k": 0, "top_p": 0.0, "cfg_coef": 3.0, "greedy": False})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
