"""The text embedding table resized after the optimiser was built: the new table is never trained.

huggingface/transformers#3532 (first as #3519): the LM fine-tuning script added tokens to the
tokenizer and called `model.resize_token_embeddings(len(tokenizer))` *after* handing
`model.parameters()` to the optimiser. Resizing builds a new embedding module, so the optimiser
kept updating the old (now detached) table and the embeddings the model reads never got a step:
"my token embeddings were not being updated". The fix: resize before building the optimiser.
Reproduced in a user's pipeline around the reference model that adds tag tokens (genre markers)
to the caption vocabulary and grows the text encoder's embedding table, copying the old rows.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_resize_embeddings_after_optimizer", thread="https://github.com/huggingface/transformers/pull/3532",
    library="transformers", idiom="own pipeline, caption vocabulary extended with tag tokens",
    cls="optimiser-mechanics",
    cause="the text encoder's token embedding is replaced by a larger one after the optimiser was built "
          "over model.parameters(): the optimiser holds the old table, the model trains with a table no "
          "optimiser steps",
    fix="resize the embedding table before building the optimiser",
    stages=("optimizer", "model"), cause_ids=("optim.param_not_in_optimizer",), symptom="ignores-caption",
    families=("optimisation",))

NEW_TOKENS = 8  # "<tag:jazz>", "<tag:rock>", ... added to the caption vocabulary


def resize_text_embeddings(model, extra: int) -> None:
    old = model.text_encoder.tokens
    new = torch.nn.Embedding(old.num_embeddings + extra, old.embedding_dim)
    with torch.no_grad():
        new.weight[: old.num_embeddings] = old.weight
        new.weight[old.num_embeddings:] = old.weight.mean(0)
    model.text_encoder.tokens = new


class TaggedCaptions(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def build_model(self, seed: int):
        model = super().build_model(seed)
        if self.fixed:
            resize_text_embeddings(model, NEW_TOKENS)  # the fix: before the optimiser sees the parameters
        return model

    def build_optimizer(self, model):
        opt = super().build_optimizer(model)
        if not self.fixed:
            resize_text_embeddings(model, NEW_TOKENS)  # bug: the optimiser already holds the old table
        return opt


def pipeline(fixed: bool) -> TaggedCaptions:
    return TaggedCaptions(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """Does the text embedding the model reads move over 3 updates?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    before = model.text_encoder.tokens.weight.detach().clone()
    batch = p.golden_batch(0)
    for _ in range(3):
        p.train_step(model, opt, batch)
    moved = float((model.text_encoder.tokens.weight.detach() - before).abs().max())
    held = any(q is model.text_encoder.tokens.weight for g in opt.param_groups for q in g["params"])
    return moved == 0.0, f"text embedding max change after 3 updates {moved:.3g}; in the optimiser: {held}"
