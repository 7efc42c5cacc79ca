"""The model ignores its captions: how a caption-conditioned token LM's code loses the condition,
from the caption table to the cross-attention memory and the optimiser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..data import Piece
    from ..model import SymbolicLM
    from ..pipeline import SymbolicBedPipeline

SECTION = "The model ignores captions or other controls"


@fault("captions_joined_by_row_order", "conditioning", "the condition is paired with the wrong music", SECTION,
       ["caption.mismatch", "condition.no_relationship"], "caption", symptom="ignores-caption")
def _captions_joined_by_row_order(p: SymbolicBedPipeline) -> None:
    table = {piece.id: piece.caption for piece in p.pieces()}
    by_name = [table[k] for k in sorted(table)]  # the caption CSV, sorted by file name
    order = {k: i for i, k in enumerate(np.random.default_rng(7).permutation(sorted(table)))}

    def captions_for(pieces: Sequence[Piece]) -> list[str]:
        # Bug: the captions come from a CSV sorted by file name and are attached by row number to the
        # MIDI files as `glob()` listed them (in directory order): each piece gets the caption of
        # some other piece, keys, meters and tempos included.
        return [by_name[order[piece.id]] for piece in pieces]

    p.captions_for = captions_for  # type: ignore[method-assign]


@fault("dropout_rate_in_percent", "conditioning",
       "condition dropout removes the caption far more often than configured", SECTION,
       ["condition.dropout_rate", "caption.empty"], "condition.dropped", symptom="ignores-caption")
def _dropout_rate_in_percent(p: SymbolicBedPipeline) -> None:
    # Bug: the run sheet gives the classifier-free dropout in percent (`cond_dropout: 10`) and the
    # code compares `rng.random() < 10`: always true, every caption becomes the null caption.
    p.cond_dropout = 10.0


@fault("text_encoder_under_no_grad", "conditioning", "the condition encoder runs without autograd", SECTION,
       ["condition.no_grad"], "condition.embedding", symptom="ignores-caption")
def _text_encoder_under_no_grad(p: SymbolicBedPipeline) -> None:
    def edit(model: SymbolicLM) -> None:
        encode = model.encode_condition

        def encode_condition(word_ids: torch.Tensor, word_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            # Bug: the caption encoding was moved into a "precompute the text features" helper copied
            # from the inference script, under `torch.no_grad()`: the encoder is in the optimiser,
            # requires_grad is on, and no gradient ever reaches it.
            with torch.no_grad():
                return encode(word_ids, word_mask)

        model.encode_condition = encode_condition  # type: ignore[method-assign]

    patch_model(p, edit)


@fault("text_encoder_not_in_optimizer", "conditioning", "the condition encoder is never updated (absent from the "
       "optimiser)", SECTION, ["optim.param_not_in_optimizer"], "optimizer", symptom="ignores-caption")
def _text_encoder_not_in_optimizer(p: SymbolicBedPipeline) -> None:
    def build_optimizer(model: SymbolicLM) -> torch.optim.Optimizer:
        # Bug: `AdamW(model.decoder.parameters(), ...)` plus the embeddings and the head, listed by
        # hand when the caption encoder did not exist yet; the word embeddings, the encoder and the
        # null token get gradients every step and never move.
        params: list[Any] = [*model.tok_emb.parameters(), *model.pos_emb.parameters(), *model.decoder.parameters(),
                             *model.norm.parameters(), *model.head.parameters()]
        return torch.optim.AdamW(params, lr=p.lr, weight_decay=p.cfg.weight_decay)

    p.build_optimizer = build_optimizer  # type: ignore[method-assign]
