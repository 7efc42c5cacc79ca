"""What AudioCraft's MusicGen solver checks at its step boundaries, broken the silent way.

The solver asserts that the audio batch and the metadata have the same size, and that logits,
targets and masks have compatible shapes. These faults break exactly those agreements in ways
that still run: a metadata list one short, targets one frame short behind a "defensive" trim, a
loss mask that broadcasts over the codebook axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from ..data import generate_clip
from ..model import masked_cross_entropy
from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import Batch, ReferencePipeline

SECTION = "Real-world example: tracing MusicGen's training step"


@fault("metadata_dropped_for_short_clip", "step_boundaries", "the audio batch size differs from the metadata count",
       SECTION, ["batch.size_mismatch"], "metadata", symptom="ignores-caption")
def _metadata_dropped_for_short_clip(p: ReferencePipeline) -> None:
    make_batch = p.make_batch

    def golden_batch(seed: int) -> Batch:
        batch = make_batch(range(p.cfg.batch_size - 1), seed=seed, data_seed=seed)
        short_seconds = 0.6 * p.cfg.segment_seconds + 0.05 * (seed % 5)
        short = generate_clip(p.cfg.batch_size - 1, seed, p.cfg.source_sample_rate, seconds=short_seconds)
        # Bug: the three parallel lists are extended one by one and the metadata line was lost
        # in a merge: the batch has 8 clips and captions but 7 metadata entries. Nothing in the
        # step reads metadata positionally, so it runs; whatever pairs metadata with audio later
        # pairs them wrongly.
        batch.clips.append(short.audio)
        batch.captions.append(short.caption)
        return batch

    p.golden_batch = golden_batch  # type: ignore[method-assign]


@fault("targets_missing_last_frame", "step_boundaries", "logits and targets have incompatible shapes",
       SECTION, ["shape.mismatch"], "targets")
def _targets_missing_last_frame(p: ReferencePipeline) -> None:
    def targets_from(tokens: Tensor) -> Tensor:
        # Bug: half of the text-LM idiom `inputs, targets = x[:-1], x[1:]`: the targets lose their
        # last frame ([B, K, T - 1] against logits [B, K, T, card]) ...
        return tokens[..., :-1]

    def compute_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        # ... and a "defensive" trim added to silence the resulting shape error hides it: the loss
        # runs, on one frame less of every clip, and the shapes never agree.
        frames = min(logits.shape[2], targets.shape[2])
        return masked_cross_entropy(logits[:, :, :frames], targets[:, :, :frames], mask[:, :, :frames])

    p.targets_from = targets_from  # type: ignore[method-assign]
    p.compute_loss = compute_loss  # type: ignore[method-assign]


@fault("loss_mask_broadcast", "step_boundaries", "the loss mask has the wrong shape and broadcasts",
       SECTION, ["shape.mismatch"], "mask.loss")
def _loss_mask_broadcast(p: ReferencePipeline) -> None:
    def loss_mask(padding: Tensor, pattern_mask: Tensor) -> Tensor:
        # Bug: the loss mask is built from the padding mask alone, `padding[:, None, :]`
        # ([B, 1, T], not [B, K, T]). It broadcasts silently against the per-codebook losses,
        # but the mean divides by B * T instead of B * K * T: the loss (and with it every
        # gradient) is K times too large.
        return padding[:, None, :].clone()

    p.loss_mask = loss_mask  # type: ignore[method-assign]
