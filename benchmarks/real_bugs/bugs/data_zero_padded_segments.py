"""Clips shorter than the training segment zero-padded to it and trained on, with no mask.

NVIDIA/waveglow#95: the data loader takes a random segment of each file and zero-pads files shorter
than the segment; the model then trains on stretches of digital silence, and the loss becomes
unstable. The reporter confirmed the fix: do not pad short files with zeros (skip them, or pad with
faint noise). Reproduced in a user's reference-style pipeline whose loss, like waveglow's, has no
padding mask at all: the golden batch's short clip is 40 % zero padding, all of it in the targets.
The twin skips clips shorter than the segment, as the thread did.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.output import _no_tap

BUG = RealBug(
    name="data_zero_padded_segments", thread="https://github.com/NVIDIA/waveglow/issues/95",
    library="torch (waveglow-style loader)", idiom="own loop; random segment, zero-pad short files, no loss mask",
    cls="data-semantics",
    cause="short clips are zero-padded to the segment and the loss (no padding mask) trains on the silence",
    fix="skip clips shorter than the segment (or mask the padding out of the loss)",
    stages=("mask.loss", "audio.cropped"), cause_ids=("mask.padding_trained",), symptom="unstable")


class SegmentPipeline(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def _keep_long(self, batch):
        """The fix: skip files shorter than the segment."""
        need = int(round(self.cfg.segment_seconds * batch.sample_rate))
        keep = [i for i, c in enumerate(batch.clips) if c.shape[-1] >= need]
        batch.clips = [batch.clips[i] for i in keep]
        batch.captions = [batch.captions[i] for i in keep]
        batch.metadata = [batch.metadata[i] for i in keep]
        return batch

    def golden_batch(self, seed):
        batch = super().golden_batch(seed)
        return self._keep_long(batch) if self.fixed else batch

    def make_batch(self, indices, seed, data_seed=0):
        batch = super().make_batch(indices, seed, data_seed)
        return self._keep_long(batch) if self.fixed else batch

    def loss_mask(self, padding: torch.Tensor, pattern_mask: torch.Tensor) -> torch.Tensor:
        return pattern_mask  # the user's loss never looks at padding (waveglow has no mask either)


def pipeline(fixed: bool) -> SegmentPipeline:
    return SegmentPipeline(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    batch = p.golden_batch(0)
    cropped, valid, _ = p.prepare_audio(batch, _no_tap)
    segment = cropped.shape[-1]
    padded = float((segment - valid).sum() / (segment * len(valid)))
    return padded > 0.01, f"{100 * padded:.1f} % of the trained samples are zero padding ({len(valid)} clips)"
