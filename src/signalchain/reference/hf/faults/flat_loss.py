"""Loss does not decrease (or decreases for the wrong reason), written the way HF fine-tuning code
breaks it: a Trainer default that wins over the intended rate, a freeze left from a LoRA recipe, a
`zero_grad` moved up, an accumulation counter that never counts, a hook that serves cached hidden
states, a loss taken from a `no_grad` forward, and decoder inputs passed beside the labels although
HF already makes them (shifted twice, or not shifted at all)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch

from ._registry import fault, patch_model
from ._util import hf_decoder_inputs, no_tap, trainable

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..pipeline import HFBedPipeline

SECTION = "Loss does not decrease"


# ---- 1. learning rate too small ---------------------------------------------------------------

@fault("trainer_default_lr", "flat_loss", "the learning rate is too small", SECTION,
       ["optim.lr_too_small"], "optimizer", symptom="flat-loss")
def _trainer_default_lr(p: HFBedPipeline) -> None:
    # Bug: the script sets up the Trainer's default schedule by hand (`lr_scheduler_type="linear"`):
    # `num_training_steps = len(train_dataloader) // gradient_accumulation_steps // world_size *
    # epochs`, with accumulation 16 and world size 2 copied from the cluster recipe, and the warm-up
    # as `int(warmup_ratio * num_training_steps)`. The Trainer guards the first division with
    # `max(..., 1)`; the copy does not, so on this small dataset (a handful of batches) the count is 0,
    # and `get_linear_schedule_with_warmup(optimizer, 0, 0)` multiplies the rate by
    # max(0, (0 - step) / 1) = 0 from the first step on: AdamW trains at rate 0.
    from transformers import get_linear_schedule_with_warmup

    accumulation, world_size, epochs, warmup_ratio = 16, 2, 3, 0.1
    batches = -(-len(p.split_examples("train")) // p.batch_size)
    total = batches // accumulation // world_size * epochs
    schedulers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    build_optimizer, train_step = p.build_optimizer, p.train_step

    def build(model: Any) -> torch.optim.Optimizer:
        optimizer = build_optimizer(model)
        schedulers[optimizer] = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total), total)
        return optimizer

    def step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        out = train_step(model, optimizer, batch, tap)
        if optimizer in schedulers:
            schedulers[optimizer].step()
        return out

    p.build_optimizer = build  # type: ignore[method-assign]
    p.train_step = step  # type: ignore[method-assign]


# ---- 2. parameters frozen ------------------------------------------------------------------------

@fault("decoder_frozen_for_lora", "flat_loss", "parameters are frozen", SECTION,
       ["optim.param_frozen"], "model", symptom="flat-loss")
def _decoder_frozen_for_lora(p: HFBedPipeline) -> None:
    def freeze(model: Any) -> None:
        # Bug: a LoRA recipe freezes the base decoder (`model.decoder.requires_grad_(False)`) before
        # `get_peft_model` adds trainable adapters; the PEFT call was commented out "for a quick
        # full fine-tune", the freeze was not: only the text encoder and its projection train.
        model.decoder.requires_grad_(False)

    patch_model(p, freeze)


# ---- 3. gradients gone at the step ---------------------------------------------------------------

@fault("zero_grad_after_backward", "flat_loss", "gradients are zero or missing at the optimiser step", SECTION,
       ["grad.missing", "grad.zero"], "grad", symptom="flat-loss")
def _zero_grad_after_backward(p: HFBedPipeline) -> None:
    def train_step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        model.train()
        out = p.step(model, batch, tap)
        out.loss.backward()
        # Bug: the Trainer calls `model.zero_grad()` after `optimizer.step()`; a refactor that
        # "clears gradients as soon as they are used" moved it right after backward, so clipping
        # and the optimiser see no gradient at all (set_to_none: every .grad is None).
        model.zero_grad(set_to_none=True)
        norm = torch.nn.utils.clip_grad_norm_(trainable(model), p.clip_grad)
        tap("grad.norm", norm)
        optimizer.step()
        out.extras["grad_norm"] = float(norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]


# ---- 4. the optimiser step is skipped ------------------------------------------------------------

@fault("accumulation_counter_in_branch", "flat_loss", "the optimiser step is skipped", SECTION,
       ["optim.step_skipped"], "optimizer", symptom="flat-loss")
def _accumulation_counter_in_branch(p: HFBedPipeline) -> None:
    accumulation = 4
    completed: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # optimiser -> steps taken

    def train_step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        model.train()
        out = p.step(model, batch, tap)
        (out.loss / accumulation).backward()
        norm = torch.nn.utils.clip_grad_norm_(trainable(model), float("inf"))
        tap("grad.norm", norm)
        n = completed.setdefault(optimizer, 0)
        # Bug: adapted from the `*_no_trainer` scripts, the gate tests `completed_steps` (incremented
        # inside the branch, after `optimizer.step()`) instead of the micro-step: (0 + 1) % 4 is
        # never 0, so gradients pile up and the optimiser never steps.
        if (n + 1) % accumulation == 0:
            torch.nn.utils.clip_grad_norm_(trainable(model), p.clip_grad)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            completed[optimizer] = n + 1
        out.extras["grad_norm"] = float(norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]


# ---- 7. the model output does not influence the loss -------------------------------------------

@fault("loss_from_no_grad_forward", "flat_loss", "the model output does not influence the selected loss",
       SECTION, ["loss.independent_of_output"], "loss", symptom="flat-loss")
def _loss_from_no_grad_forward(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: the forward written for logging the validation loss (under torch.no_grad()) became
        # the training forward. backward() raised "element 0 of tensors does not require grad",
        # and `loss.requires_grad_(True)` silenced it: the loss is now a leaf cut off from the model.
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.requires_grad_(True)
        return out

    p.forward = forward  # type: ignore[method-assign]


# ---- 8. stale predictions --------------------------------------------------------------------------

@fault("stale_hidden_hook", "flat_loss", "the same stale predictions are reused", SECTION,
       ["loss.stale_predictions"], "logits", symptom="flat-loss")
def _stale_hidden_hook(p: HFBedPipeline) -> None:
    def edit(model: Any) -> None:
        cache: dict[tuple[int, ...], torch.Tensor] = {}

        def keep(module: Any, args: Any, output: torch.Tensor) -> torch.Tensor:
            # Bug: a forward hook on the decoder's final layer norm stores hidden states for a
            # feature-logging callback, keyed by shape, and *returns* the stored tensor ("reuse it,
            # it is the same batch size") — a hook's return value replaces the module's output. Every
            # batch of that shape gets the first batch's hidden states; only the heads still learn.
            key = tuple(output.shape)
            if key not in cache:
                cache[key] = output.detach()
            return cache[key]

        model.decoder.model.decoder.layer_norm.register_forward_hook(keep)

    patch_model(p, edit)


# ---- 5. targets misaligned: decoder inputs passed beside the labels -----------------------------

@fault("decoder_inputs_shifted_twice", "flat_loss", "the targets are misaligned with the decoder inputs", SECTION,
       ["targets.misaligned"], "targets", symptom="flat-loss")
def _decoder_inputs_shifted_twice(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: the collator already makes `decoder_input_ids` with `shift_tokens_right(labels)`, and
        # the training step runs them through `model.prepare_decoder_input_ids_from_labels` again
        # (on ids laid out as labels): shifted twice, position t sees frames up to t - 2, and is
        # trained to predict two frames ahead.
        once = hf_decoder_inputs(model, labels).reshape(labels.shape[0], labels.shape[2], -1)  # [B, K, T']
        twice = hf_decoder_inputs(model, once.transpose(1, 2))
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=twice, labels=labels)

    p.forward = forward  # type: ignore[method-assign]


@fault("decoder_inputs_are_labels", "flat_loss", "the targets leak into the decoder inputs (not shifted)", SECTION,
       ["targets.misaligned"], "targets", symptom="too-good-validation")
def _decoder_inputs_are_labels(p: HFBedPipeline) -> None:
    def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        # Bug: "the docs say you can set labels = input_ids", so the labels are also passed as
        # `decoder_input_ids` (-100 mapped to the pad id). With decoder inputs given, HF does not
        # shift: every position is shown the very code it must predict, and the loss (on training
        # and validation data alike) drops far below what the model has learnt.
        b, tp, k = labels.shape
        inputs = labels.masked_fill(labels == -100, model.config.decoder.pad_token_id)
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=inputs.transpose(1, 2).reshape(b * k, tp),
                     labels=labels)

    p.forward = forward  # type: ignore[method-assign]
