"""HF MusicGen trained on labels that are the raw codes, without the decoder's delay pattern.

huggingface/transformers#28986: the reporter computes MusicGen's loss by passing `labels` to
`MusicgenForConditionalGeneration.forward`, with the codes themselves as labels; the maintainer:
that loss computation was wrong and training was not supported yet, #29802 adds it: the decoder
predicts the codebooks in a *delayed* pattern (codebook k k frames late), so labels must be the codes
laid out by `build_delay_pattern_mask`, with -100 on the pattern's empty positions (as the
musicgen-dreamboothing scripts do). Reproduced on the HF bed (a real, tiny
`MusicgenForConditionalGeneration`): the user's `make_labels` transposes the codes to `[B, T, K]`
and masks the padding, but never delays them, while the decoder generates with delays 0, 1, 2, 3.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference.hf import HFBedPipeline

BUG = RealBug(
    name="data_labels_without_delay_pattern", thread="https://github.com/huggingface/transformers/pull/28986",
    library="transformers", idiom="HF MusicGen, labels= passed to forward, own make_labels",
    cls="data-semantics",
    cause="the labels are the codes in frame time; the decoder predicts (and generates) codebook k k frames late",
    fix="lay the codes out with the decoder's build_delay_pattern_mask before making labels (#29802)",
    stages=("targets", "tokens.pattern"), cause_ids=("targets.misaligned",), symptom="flat-loss")


class UndelayedLabels(HFBedPipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def make_labels(self, model, codes, valid):
        if self.fixed:
            return super().make_labels(model, codes, valid)
        # the codes as they come from EnCodec, padding set to -100, no delay
        return codes, labels_from_pattern_nodelay(codes, valid, self.pad_token_id)


def labels_from_pattern_nodelay(codes: torch.Tensor, valid: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    b, k, t = codes.shape
    frame = torch.arange(t)[None, None, :]
    keep = frame < valid[:, None, None]
    return torch.where(keep, codes, torch.full_like(codes, -100)).transpose(1, 2).contiguous()


def pipeline(fixed: bool) -> UndelayedLabels:
    return UndelayedLabels(fixed)


def first_labelled(labels: torch.Tensor) -> list[int]:
    """Per codebook, the first position any example has a label at ([B, T', K])."""
    have = (labels != -100).any(0)  # [T', K]
    return [int(have[:, k].nonzero()[0]) for k in range(labels.shape[-1])]


def shows(fixed: bool) -> tuple[bool, str]:
    p = pipeline(fixed)
    model = p.build_model(0)
    batch = p.golden_batch(0)
    cropped, valid = p.prepare_audio(batch, lambda stage, value, **meta: value)
    codes = p.encode(model, torch.from_numpy(cropped))
    frames = p.valid_frames(valid, codes.shape[-1])
    _, labels = p.make_labels(model, codes, frames)
    starts = first_labelled(labels)
    delays = p._model_delays(model, codes.shape[1])
    offsets = [s - starts[0] for s in starts]
    return offsets != list(delays), (f"labels start per codebook at {offsets}; "
                                     f"the decoder generates with delays {delays}")
