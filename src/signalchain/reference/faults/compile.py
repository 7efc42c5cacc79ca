"""A compiled model that recompiles on every step: crop lengths drawn per batch under `dynamic=False`.

The model is compiled with `torch.compile(dynamic=False)` (static shapes: the setting recipes
recommend for CUDA graphs, `mode="reduce-overhead"`, or to stop symbolic shapes from slowing the
kernels) and the data path crops each batch to a length drawn per batch (a duration augmentation).
Every batch brings a token sequence of a new length, every new length fails the compiled forward's
size guard, and dynamo compiles a new graph on the step; after `config.recompile_limit` graphs it
gives up and runs the forward eagerly. With dynamo's default (automatic dynamic shapes) the same
data would cost one extra compilation, not one per step.

The backend is `"eager"` to keep the catalogue fast on CPU: dynamo's tracing, guards and recompile
decisions come before the backend and are the same as under inductor (the default), which would
only add the code generation to each recompilation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import ReferencePipeline

SECTION = "Slow training and stalled pipelines"
SHORTEST = 0.5  # of the configured segment


@fault("compile_variable_crops", "performance",
       "a compiled model recompiles every step: crop lengths drawn per batch, compiled with dynamic=False",
       SECTION, ["perf.recompile"], "audio.cropped", symptom="slow")
def _compile_variable_crops(p: ReferencePipeline) -> None:
    p.cfg.compile = p.cfg.compile or "eager"
    p.cfg.compile_dynamic = False  # static shapes, as a CUDA-graphs recipe asks
    choose_crops = p.choose_crops
    hop = p.codec.hop

    def random_length_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug (with dynamic=False above): a duration augmentation crops each batch to a length drawn
        # per batch, in whole codec frames between half and all of the segment, so the token
        # sequence the compiled model reads has a new length on almost every step.
        frames = segment // hop
        return choose_crops(lengths, hop * int(rng.integers(int(frames * SHORTEST), frames + 1)), rng)

    p.choose_crops = random_length_crops  # type: ignore[method-assign]
