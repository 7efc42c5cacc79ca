"""The model ignores captions: how HF MusicGen fine-tuning code loses the text condition, from the
caption table to the decoder's cross-attention."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ._registry import fault, patch_model

if TYPE_CHECKING:
    from ..pipeline import HFBedPipeline

SECTION = "The model ignores captions or other controls"


# ---- 2. the condition is paired with the wrong audio ------------------------------------------------

@fault("captions_joined_by_row_order", "conditioning", "the condition is paired with the wrong audio", SECTION,
       ["condition.no_relationship", "caption.mismatch"], "caption", symptom="ignores-caption")
def _captions_joined_by_row_order(p: HFBedPipeline) -> None:
    # Bug: the captions live in a CSV sorted by file name and are attached to the audio with
    # `dataset.add_column("caption", csv["caption"])`, i.e. by row order, while the audio folder was
    # listed with `os.listdir()` (arbitrary order): every clip gets some other clip's caption. Each
    # clip keeps its own metadata sidecar.
    rng = np.random.default_rng(1234)
    order = rng.permutation(len(p.examples))
    captions = [p.examples[int(i)].caption for i in order]
    p.examples = [replace(e, caption=c) for e, c in zip(p.examples, captions)]


# ---- 3. tokenisation truncates the caption -------------------------------------------------------------

@fault("caption_max_length_from_duration", "conditioning", "tokenisation truncates the caption", SECTION,
       ["caption.truncated"], "condition.tokens", symptom="ignores-caption")
def _caption_max_length_from_duration(p: HFBedPipeline) -> None:
    # Bug: `processor(text=..., padding=True, truncation=True, max_length=args.max_length)` is fed
    # the script's `max_length`, which means the audio duration in seconds (5): captions of 10-20
    # words keep four and the end-of-text token ("medium tempo plucked string").
    p.max_text_len = 5


# ---- 4. condition dropout removes it more often than intended -----------------------------------------

@fault(
    "dropout_rate_in_percent",
    "conditioning",
    "condition dropout removes the caption far more often than configured",
    SECTION,
    ["condition.dropout_rate", "caption.empty"],
    "condition.dropped",
    symptom="ignores-caption",
)
def _dropout_rate_in_percent(p: HFBedPipeline) -> None:
    # Bug: the config gives the classifier-free dropout in percent (`caption_dropout: 10`, as the
    # run sheet does) and the code compares `rng.random() < 10`: always true, every caption of every
    # batch becomes the null caption, and the model only ever learns unconditional music.
    p.cond_dropout = 10.0


# ---- 5. the condition encoder is frozen or detached ---------------------------------------------------

@fault("freeze_fresh_text_encoder", "conditioning", "the condition encoder is frozen", SECTION,
       ["condition.encoder_frozen"], "condition.embedding", symptom="ignores-caption")
def _freeze_fresh_text_encoder(p: HFBedPipeline) -> None:
    def freeze(model: Any) -> None:
        # Bug: the fine-tuning recipe calls `model.freeze_text_encoder()`, right for a pretrained
        # T5; this run swapped in a freshly initialised text encoder (a new caption vocabulary) and
        # kept the call: the encoder stays at its random init for the whole run.
        model.freeze_text_encoder()

    patch_model(p, freeze)


@fault("text_encoder_under_no_grad", "conditioning", "the condition encoder runs without autograd", SECTION,
       ["condition.no_grad"], "condition.embedding", symptom="ignores-caption")
def _text_encoder_under_no_grad(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: to save memory, the text embeddings are computed first and handed over as
        # `encoder_outputs`, with the snippet copied from an inference example — inside
        # `torch.no_grad()`. The run trains the text encoder (it is in the optimiser, requires_grad
        # is on), but no gradient ever reaches it.
        with torch.no_grad():
            encoded = model.text_encoder(input_ids=ids, attention_mask=mask)
        return model(encoder_outputs=encoded, attention_mask=mask, labels=labels)

    p.forward = forward  # type: ignore[method-assign]


@fault(
    "text_encoder_not_in_optimizer",
    "conditioning",
    "the condition encoder is never updated (absent from the optimiser)",
    SECTION,
    ["optim.param_not_in_optimizer"],
    "optimizer",
    symptom="ignores-caption",
)
def _text_encoder_not_in_optimizer(p: HFBedPipeline) -> None:
    def param_groups(model: Any) -> list[dict[str, Any]]:
        # Bug: `AdamW(model.decoder.parameters(), lr=...)`, as most MusicGen fine-tuning snippets
        # write it: the text encoder and the text-to-decoder projection keep requires_grad=True,
        # get gradients every step, and never move.
        return [{"params": [q for q in model.decoder.parameters() if q.requires_grad], "lr": p.lr}]

    p.param_groups = param_groups  # type: ignore[method-assign]


# ---- 6. the fusion does not use the condition ---------------------------------------------------------

@fault("encoder_states_not_passed", "conditioning", "the fusion module does not use the condition tensor", SECTION,
       ["condition.unused"], "logits", symptom="ignores-caption")
def _encoder_states_not_passed(p: HFBedPipeline) -> None:
    from transformers.modeling_outputs import Seq2SeqLMOutput

    from ._util import hf_decoder_inputs

    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: the step is split into "encode text" and "run the decoder" to cache the T5 pass; the
        # decoder call passes `encoder_attention_mask=mask` but not `encoder_hidden_states=`. MusicGen's
        # decoder layers skip cross-attention when the states are None: the model trains as an
        # unconditional LM, the captions are computed, logged, and never used.
        hidden = model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        out = model.decoder(input_ids=hf_decoder_inputs(model, labels), encoder_attention_mask=mask, labels=labels)
        return Seq2SeqLMOutput(loss=out.loss, logits=out.logits, encoder_last_hidden_state=hidden)

    p.forward = forward  # type: ignore[method-assign]


# ---- 4 and 9. guidance's null branch left on in training ---------------------------------------------

@fault("cfg_batch_doubled_in_training", "conditioning",
       "condition dropout removes it more often than intended: guidance's null copy of every example is trained",
       SECTION, ["shape.mismatch", "condition.dropout_rate"], "targets", symptom="ignores-caption")
def _cfg_batch_doubled_in_training(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: "train the way it generates": with `guidance_scale` set, generate runs every prompt
        # twice, once with an all-zero attention mask (the null condition); the training forward
        # copies that, concatenating a null copy of the batch (labels repeated). Half of every update
        # is unconditional, on top of the configured 10 % caption dropout — and the outputs hold
        # twice the batch the labels describe.
        return model(input_ids=torch.cat([ids, ids]), attention_mask=torch.cat([mask, torch.zeros_like(mask)]),
                     labels=torch.cat([labels, labels]))

    p.forward = forward  # type: ignore[method-assign]
