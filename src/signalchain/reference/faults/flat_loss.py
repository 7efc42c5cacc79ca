"""Loss does not decrease: the optimisation path is cut (the method's causes 1-4 and 6-10).

Each fault breaks one link of "targets -> loss -> gradients -> optimiser -> parameters" the way a
real training script does: a setting in the wrong units, an inverted freeze filter, a module rebuilt
after the optimiser, a misplaced `zero_grad`, a `.detach()`, a counter that never fires, a cache, a
dtype cast, a model that is too small. The data-side causes (random, constant or misaligned
targets, a nearly empty mask, a repeating loader, stale cached tokens) are in `flat_loss_data.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from ..output import _no_tap
from ._registry import fault, patch_model

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..model import MusicLM
    from ..output import Tap
    from ..pipeline import Batch, ReferencePipeline

SECTION = "Loss does not decrease"


def _seeded_linear(n_in: int, n_out: int, seed: int) -> nn.Linear:
    """A Linear initialised as the model does (std 0.02), from its own generator (deterministic)."""
    layer = nn.Linear(n_in, n_out)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.02, generator=g)
        layer.bias.zero_()
    return layer


# ---- 1. learning rate too small -------------------------------------------------------------------

@fault("lr_too_small", "flat_loss", "the learning rate is too small", SECTION,
       ["optim.lr_too_small"], "optimizer", symptom="flat-loss")
def _lr_too_small(p: ReferencePipeline) -> None:
    # Bug: the rate follows the linear scaling rule of a recipe tuned at batch 256 (Goyal et al.:
    # scale the rate with the batch), written `lr = base_lr * (batch_size // 256)`. The integer
    # division (meant `/`) is 0 for every batch under 256: AdamW gets lr=0 and no parameter ever
    # moves, while the loop, the schedule and the logs all look normal.
    reference_batch = 256
    p.cfg.lr = p.cfg.lr * (p.cfg.batch_size // reference_batch)


# ---- 2. parameters frozen or absent from the optimiser -------------------------------------------

@fault("params_frozen", "flat_loss", "parameters are frozen", SECTION,
       ["optim.param_frozen"], "model", symptom="flat-loss")
def _params_frozen(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        for name, param in model.named_parameters():
            # Bug: meant to keep the text encoder frozen as MusicGen keeps T5 frozen
            # (`not name.startswith(...)`); the `not` was lost, so only the encoder trains and
            # the whole language model (embeddings, blocks, heads) is frozen.
            param.requires_grad_(name.startswith("text_encoder."))

    patch_model(p, patch)


@fault("optimizer_before_heads_replaced", "flat_loss", "parameters are absent from the optimiser",
       SECTION, ["optim.param_not_in_optimizer"], "optimizer", symptom="flat-loss")
def _optimizer_before_heads_replaced(p: ReferencePipeline) -> None:
    build_optimizer = p.build_optimizer

    def build(model: MusicLM) -> torch.optim.Optimizer:
        optimizer = build_optimizer(model)
        # Bug: the output heads are re-created (re-initialised for fine-tuning) *after* the
        # optimiser was built; it still holds the old heads' tensors, the new ones never update.
        dim, card = model.config.dim, model.config.cardinality
        model.heads = nn.ModuleList(_seeded_linear(dim, card, 1000 + k) for k in range(len(model.heads)))
        return optimizer

    p.build_optimizer = build  # type: ignore[method-assign]


@fault("param_groups_miss_matrices", "flat_loss", "parameters are absent from the optimiser", SECTION,
       ["optim.param_not_in_optimizer"], "optimizer", symptom="flat-loss")
def _param_groups_miss_matrices(p: ReferencePipeline) -> None:
    def param_groups(model: MusicLM) -> list[dict[str, Any]]:
        # Bug: an off-by-one in the weight-decay split (`dim() > 2` for `dim() >= 2`): every 2-D
        # weight (all Linear and Embedding matrices) falls through both filters and is never
        # handed to the optimiser; only biases, norms and the 3-D null slot train.
        decay = [q for q in model.parameters() if q.requires_grad and q.dim() > 2]
        no_decay = [q for q in model.parameters() if q.requires_grad and q.dim() < 2]
        return [{"params": decay, "weight_decay": p.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    p.param_groups = param_groups  # type: ignore[method-assign]


# ---- 3. gradients zero, missing or detached --------------------------------------------------------

@fault("zero_grad_before_step", "flat_loss", "gradients are zero or missing at the optimiser step",
       SECTION, ["grad.missing", "grad.zero"], "grad", symptom="flat-loss")
def _zero_grad_before_step(p: ReferencePipeline) -> None:
    def train_step(model: MusicLM, optimizer: torch.optim.Optimizer, batch: Batch, tap: Tap = _no_tap) -> StepOutput:
        model.train()
        out = p.step(model, batch, tap)
        out.loss.backward()
        # Bug: `zero_grad()` moved up while "cleaning" the loop: it now runs between backward and
        # step, so every gradient is gone (None) when the optimiser and the clipping look at it.
        optimizer.zero_grad(set_to_none=True)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), p.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        scheduler = p.scheduler_for(optimizer)
        if scheduler is not None:
            scheduler.step()
        out.extras["grad_norm"] = float(grad_norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]


@fault("embeddings_detached", "flat_loss", "gradients are detached before the input embeddings",
       SECTION, ["grad.detached", "grad.missing"], "grad", symptom="flat-loss")
def _embeddings_detached(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        for emb in model.embeddings:
            lookup = emb.forward

            def forward(ids: Tensor, lookup: Any = lookup) -> Tensor:
                # Bug: a stop-gradient copied from a frozen-feature recipe: the codebook embeddings
                # are `.detach()`ed before they are summed, so the embedding tables never learn.
                return lookup(ids).detach()

            emb.forward = forward  # type: ignore[method-assign]

    patch_model(p, patch)


@fault("logits_detached", "flat_loss", "the logits are detached from the graph", SECTION,
       ["grad.detached"], "logits", symptom="flat-loss")
def _logits_detached(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        predict = model.compute_predictions

        def compute_predictions(codes: Tensor, cond: Tensor, cond_mask: Tensor) -> tuple[Tensor, Tensor]:
            # Bug: the logits are `.detach()`ed so they can be kept for metrics, and the kept
            # copy is what the loss sees. The loss has no graph: backward() raises, as it does
            # in a real run.
            logits, mask = predict(codes, cond, cond_mask)
            return logits.detach(), mask

        model.compute_predictions = compute_predictions  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 4. the optimiser step is skipped ---------------------------------------------------------------

@fault("grad_accumulation_never_steps", "flat_loss", "the optimiser step is skipped", SECTION,
       ["optim.step_skipped"], "optimizer", symptom="flat-loss")
def _grad_accumulation_never_steps(p: ReferencePipeline) -> None:
    accumulate = 4

    def train_step(model: MusicLM, optimizer: torch.optim.Optimizer, batch: Batch, tap: Tap = _no_tap) -> StepOutput:
        # Bug: the micro-batch counter is a local variable, re-created on every call, so it is
        # always 1 and `1 % 4 != 0`: gradients pile up and the optimiser never steps.
        micro_step = 0
        model.train()
        out = p.step(model, batch, tap)
        (out.loss / accumulate).backward()
        micro_step += 1
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        tap("grad.norm", grad_norm)
        if micro_step % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), p.cfg.clip_grad)
            optimizer.step()
            scheduler = p.scheduler_for(optimizer)
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]


# ---- 6-7. the loss mask is empty; the output does not reach the loss -----------------------------

@fault("mask_all_padding", "flat_loss", "the valid loss mask is empty", SECTION,
       ["mask.empty"], "mask.padding", symptom="flat-loss")
def _mask_all_padding(p: ReferencePipeline) -> None:
    def padding_mask(valid: np.ndarray, frames: int) -> torch.Tensor:
        # Bug: the comparison is inverted (frame >= length), so every real frame counts as padding.
        n_valid = np.ceil(valid / p.codec.hop).astype(np.int64)
        mask = np.arange(frames)[None, :] >= np.maximum(n_valid[:, None], frames)
        return torch.from_numpy(mask)

    p.padding_mask = padding_mask  # type: ignore[method-assign]


@fault("loss_from_targets", "flat_loss", "the model output does not influence the selected loss",
       SECTION, ["loss.independent_of_output"], "loss", symptom="flat-loss")
def _loss_from_targets(p: ReferencePipeline) -> None:
    def compute_loss(
        logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Bug: a refactor computes the loss from a one-hot of the targets instead of the logits
        # (two variables swapped). backward() then complained that the loss needs no gradient, and
        # someone "fixed" that with requires_grad_(): the loss is now a constant cut off from the model.
        onehot = torch.nn.functional.one_hot(targets, logits.shape[-1]).float() * 10.0
        ce = torch.nn.functional.cross_entropy(onehot.flatten(0, 2), targets.flatten(), reduction="none")
        ce = ce.view_as(targets) * mask
        per = ce.sum(dim=(0, 2)) / mask.sum(dim=(0, 2)).clamp(min=1)
        loss = ce.sum() / mask.sum().clamp(min=1)
        return loss.requires_grad_(True), per

    p.compute_loss = compute_loss  # type: ignore[method-assign]


# ---- 8. stale predictions -------------------------------------------------------------------------

@fault("stale_hidden_cache", "flat_loss", "the same stale predictions are reused", SECTION,
       ["loss.stale_predictions"], "logits", symptom="flat-loss")
def _stale_hidden_cache(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        norm = model.norm.forward
        cache: dict[tuple[int, ...], Tensor] = {}

        def forward(x: Tensor) -> Tensor:
            # Bug: a prefix cache added to speed up sampling is keyed by the input's *shape* and
            # stays on in training: the decoder's output of the first batch is returned for every
            # later batch of that shape. Only the output heads still see fresh gradients.
            key = tuple(x.shape)
            if key not in cache:
                cache[key] = norm(x).detach()
            return cache[key]

        model.norm.forward = forward  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 9. integer or device conversions break the path ---------------------------------------------

@fault("condition_cast_to_ids_dtype", "flat_loss", "an integer conversion breaks the condition path",
       SECTION, ["dtype.path_broken", "condition.no_grad"], "condition.embedding", symptom="flat-loss")
def _condition_cast_to_ids_dtype(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        encode = model.encode_condition

        def encode_condition(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
            cond, cond_mask = encode(ids, mask)
            # Bug: `cond.to(ids)` was meant to move the condition to the ids' device, but
            # Tensor.to(tensor) copies the dtype too: the embedding is truncated to int64 (all
            # zeros, |x| < 1) and cut from the graph; `.float()` silenced the Linear's dtype error.
            return cond.to(ids).float(), cond_mask

        model.encode_condition = encode_condition  # type: ignore[method-assign]

    patch_model(p, patch)


@fault("hidden_numpy_roundtrip", "flat_loss", "a device conversion breaks the gradient path", SECTION,
       ["dtype.path_broken", "grad.missing"], "grad", symptom="flat-loss")
def _hidden_numpy_roundtrip(p: ReferencePipeline) -> None:
    def patch(model: MusicLM) -> None:
        norm = model.norm.forward

        def forward(x: Tensor) -> Tensor:
            # Bug: the decoder output is soft-clipped with numpy (`np.clip` for "stability");
            # `.detach().cpu().numpy()` was needed to call it, and the round trip cuts the graph:
            # blocks, embeddings and the text encoder get no gradient.
            clipped = np.clip(x.detach().cpu().numpy(), -1e4, 1e4)
            return norm(torch.from_numpy(clipped).to(x.device))

        model.norm.forward = forward  # type: ignore[method-assign]

    patch_model(p, patch)


# ---- 10. the model lacks capacity -------------------------------------------------------------------

@fault("model_too_small", "flat_loss", "the model lacks enough capacity for the task", SECTION,
       ["model.capacity"], "model", symptom="flat-loss")
def _model_too_small(p: ReferencePipeline) -> None:
    # Bug: the smoke-test override (dim=2, one head, one layer, no MLP expansion) stayed in the
    # run's config: the model cannot represent even one small batch, at any learning rate.
    # (At dim 8 it still memorises one batch with a high enough rate: that is a rate problem.)
    p.cfg.dim, p.cfg.heads, p.cfg.layers, p.cfg.ffn_mult = 2, 1, 1, 1


@fault("bottleneck_width_one", "flat_loss", "the model lacks enough capacity for the task", SECTION,
       ["model.capacity"], "model", symptom="flat-loss")
def _bottleneck_width_one(p: ReferencePipeline) -> None:
    build = p.build_model

    def build_model(seed: int) -> MusicLM:
        model = build(seed)
        dim = model.config.dim
        # Bug: a low-rank adapter before the heads takes its width from the `use_adapter=True`
        # flag instead of `adapter_dim`: True == 1, so every prediction passes through 1 number.
        width = int(True)
        model.norm = nn.Sequential(model.norm, _seeded_linear(dim, width, seed + 1),
                                   _seeded_linear(width, dim, seed + 2))
        return model

    p.build_model = build_model  # type: ignore[method-assign]
