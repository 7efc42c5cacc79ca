"""A compiled kernel that recompiles on every step: crop lengths drawn per batch under `dynamic=False`.

The decoder's attention runs through a kernel compiled once with `torch.compile(..., dynamic=False)`
(the idiom of the FlexAttention examples, `torch.compile(flex_attention, dynamic=False)`, and of
recipes that want static shapes for CUDA graphs), and the data path crops each batch to a length
drawn per batch (a duration augmentation). Every batch brings a sequence of a new length, every new
length fails the compiled kernel's size guard, and dynamo compiles a new graph on the step; after
`config.recompile_limit` graphs it gives up and runs the kernel eagerly. Under dynamo's default
(automatic dynamic shapes) the same data would cost one extra compilation, not one per step.

The backend is `"eager"` to keep the catalogue fast on CPU: dynamo's tracing, guards and recompile
decisions come before the backend and are the same as under inductor (the default), which would
only add code generation to each recompilation. The kernel is small for the same reason: compiling
the whole model (`RefConfig.compile`) recompiles the same way, a few times slower per step.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ._registry import fault

if TYPE_CHECKING:
    from ..model import MusicLM, SelfAttention
    from ..pipeline import ReferencePipeline

SECTION = "Slow training and stalled pipelines"
SHORTEST = 0.5  # of the configured segment


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """q, k, v [B, H, S, Dh] -> [B, H, S, Dh], step s attending to steps <= s."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


def _forward_with(kernel: Any) -> Any:
    def forward(self: SelfAttention, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        y = kernel(q, k, v, self.dropout if self.training else 0.0)  # [B, H, S, Dh]
        return self.out(y.transpose(1, 2).reshape(B, S, D))

    return forward


@fault("compile_variable_crops", "performance",
       "a compiled kernel recompiles every step: crop lengths drawn per batch, compiled with dynamic=False",
       SECTION, ["perf.recompile"], "audio.cropped", symptom="slow")
def _compile_variable_crops(p: ReferencePipeline) -> None:
    build_model = p.build_model
    choose_crops = p.choose_crops
    hop = p.codec.hop
    # Compiled once, at set-up, with static shapes (as a FlexAttention or CUDA-graphs recipe asks).
    kernel = torch.compile(causal_attention, backend="eager", dynamic=False)

    def build(seed: int) -> MusicLM:
        model = build_model(seed)
        for block in model.blocks:
            block.self_attn.forward = types.MethodType(_forward_with(kernel), block.self_attn)
        return model

    def random_length_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug (with dynamic=False above): a duration augmentation crops each batch to a length drawn
        # per batch, in whole codec frames between half and all of the segment, so the sequence the
        # compiled kernel reads has a new length on almost every step.
        frames = segment // hop
        return choose_crops(lengths, hop * int(rng.integers(int(frames * SHORTEST), frames + 1)), rng)

    p.build_model = build  # type: ignore[method-assign]
    p.choose_crops = random_length_crops  # type: ignore[method-assign]
