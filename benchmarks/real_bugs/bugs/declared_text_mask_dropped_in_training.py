"""The caption's attention mask is built by the tokenizer and used at generation, but dropped in training.

mosaicml/diffusion#149: the text encoder got the tokenizer's attention mask at generation time but not
in the training forward ("a train/test mismatch ... the mask is applied to the text encoder at
generation time ..., but not during training time"); without it the padding tokens of every shorter
caption in a padded batch take part in the text encoder's (bidirectional) self-attention, so a
caption's embedding depends on the longest caption it was batched with and differs from what the
model is conditioned on when it generates. The merged fix: pass the mask in the training forward,
as generation does (#147 had fixed the mirror case). Reproduced on the HF bed (a tiny
`MusicgenForConditionalGeneration`, T5 text encoder): the user's forward calls
`model(input_ids=ids, labels=labels)` while the tokenizer pads the captions and returns the mask, and
`generate` still passes it.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference.hf import HFBedPipeline

BUG = RealBug(
    name="declared_text_mask_dropped_in_training", thread="https://github.com/mosaicml/diffusion/pull/149",
    library="transformers", idiom="HF MusicGen, padded captions, forward(input_ids, labels) without attention_mask",
    cls="declared-vs-done",
    cause="the training forward drops the tokenizer's attention mask: the T5 encoder and the decoder's "
          "cross-attention attend to padding, so each caption's condition depends on its batch and differs "
          "from the (masked) condition generation uses",
    fix="pass attention_mask=mask to the model in training, as generation does",
    stages=("condition.embedding", "condition.mask"),
    cause_ids=("condition.mask_ignored", "condition.padding_attended", "condition.train_generate_mismatch"),
    symptom="ignores-caption")


class MasklessForward(HFBedPipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def forward(self, model, ids, mask, labels):
        if self.fixed:
            return model(input_ids=ids, attention_mask=mask, labels=labels)
        return model(input_ids=ids, labels=labels)  # the mask the tokenizer returned is never passed


def pipeline(fixed: bool) -> MasklessForward:
    return MasklessForward(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """Each caption's text-encoder output in the training batch against the same caption encoded alone
    (no padding, as at generation), over its real tokens."""
    p = pipeline(fixed)
    model = p.build_model(0)
    batch = p.golden_batch(0)
    seen: dict[str, torch.Tensor] = {}

    def tap(stage, value, /, **meta):
        seen[stage] = value
        return value

    with torch.no_grad():
        p.step(model, batch, tap)
        ids, mask, emb = seen["condition.tokens"], seen["condition.mask"], seen["condition.embedding"]
        diffs, padded = [], 0
        for i in range(ids.shape[0]):
            n = int(mask[i].sum())
            padded += int(n < ids.shape[1])
            alone = model.text_encoder(input_ids=ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n]).last_hidden_state
            diffs.append(float((emb[i, :n] - alone[0]).abs().max() / alone.abs().max()))
    return max(diffs) > 1e-3, (f"{padded} of {ids.shape[0]} captions padded; training condition vs the caption "
                               f"alone, max relative difference per caption {[round(d, 4) for d in diffs]}")
