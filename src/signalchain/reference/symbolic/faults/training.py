"""The method's generic training faults, written the way they arise in a token LM's training code:
a learning rate in the wrong units (below float32's resolution), a misplaced `zero_grad`, unshifted
targets, padding trained as a target, an empty loss mask, a log of zero in a hand-written loss. The
doctor's families judge them unchanged on the symbolic bed, with the ids and stages of the audio
reference's analogues."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..model import IGNORE
from ._registry import fault

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..model import SymbolicLM
    from ..pipeline import SymBatch, SymbolicBedPipeline


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


FLAT = "Loss does not decrease"


# ---- learning rate ------------------------------------------------------------------------------------

@fault("lr_per_token_rule", "flat_loss", "the learning rate is too small", FLAT,
       ["optim.lr_too_small"], "optimizer", symptom="flat-loss")
def _lr_per_token_rule(p: SymbolicBedPipeline) -> None:
    # Bug: the recipe states its rate per token seen over the run (for a loss summed over every
    # token), and the port divides AdamW's rate by all the tokens the run will see, `epochs *
    # len(train_set) * max_len` (100 * 51 * 256 ≈ 1.3e6). AdamW's rate is per update and the loss is
    # already a mean: 3e-3 becomes ≈ 2.3e-9, below the float32 spacing of most weights (≈ 7e-9 at the
    # median |θ| ≈ 0.06), so most of every update rounds away and the weights move by rounding.
    epochs = 100
    p.lr = p.lr / (epochs * len(p.training_examples()) * p.cfg.max_len)


@fault("sgd_lr_kept_for_adamw", "learning_rate", "the learning rate is too high: the loss oscillates and diverges",
       "Learning rate problems", ["optim.lr_too_large", "loss.spike"], "optimizer", symptom="unstable")
def _sgd_lr_kept_for_adamw(p: SymbolicBedPipeline) -> None:
    # Bug: the rate of an SGD recipe (0.5) is kept when the optimiser is switched to AdamW, whose
    # updates are already normalised: every step moves each weight by about the rate itself.
    p.lr = 0.5


# ---- gradients and the optimiser ------------------------------------------------------------------------

@fault("zero_grad_after_backward", "flat_loss", "gradients are zero or missing at the optimiser step", FLAT,
       ["grad.missing", "grad.zero"], "grad", symptom="flat-loss")
def _zero_grad_after_backward(p: SymbolicBedPipeline) -> None:
    def train_step(model: SymbolicLM, optimizer: torch.optim.Optimizer, batch: SymBatch,
                   tap: Any = _no_tap) -> StepOutput:
        model.train()
        out = p.step(model, batch, tap)
        out.loss.backward()
        # Bug: `zero_grad()` was moved "to the top of the update" while tidying the loop and landed
        # between backward and step: every gradient is gone when clipping and AdamW look at it.
        optimizer.zero_grad(set_to_none=True)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), p.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        out.extras["grad_norm"] = float(grad_norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]


# ---- targets and masks ----------------------------------------------------------------------------------

@fault("targets_not_shifted", "flat_loss", "the targets are misaligned in time", FLAT,
       ["targets.misaligned"], "targets", symptom="flat-loss")
def _targets_not_shifted(p: SymbolicBedPipeline) -> None:
    def targets_from(ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        # Bug: the shift was removed "because the model shifts internally" (HF's causal LMs shift
        # `labels` inside the loss); this model does not: logits[t] is trained to predict the token
        # it is reading, and the loss falls to ~0 by copying.
        return ids.masked_fill(~padding, IGNORE)

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("pad_trained_as_target", "flat_loss", "padding trained as targets", FLAT,
       ["mask.padding_trained"], "mask.loss", symptom="flat-loss")
def _pad_trained_as_target(p: SymbolicBedPipeline) -> None:
    def targets_from(ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        # Bug: the labels are `ids[:, 1:]` with the ignore index set where `ids == eos` (the
        # author's idea of "the end"), not on the padding: every PAD after the EOS is a target, and
        # the shorter pieces teach the model mostly to emit PAD.
        targets = torch.full_like(ids, IGNORE)
        eos = p.tokenizer.vocab["EOS_None"]
        targets[:, :-1] = ids[:, 1:].masked_fill(ids[:, :-1] == eos, IGNORE)
        return targets

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("loss_mask_inverted", "flat_loss", "the valid loss mask keeps the padding and none of the music", FLAT,
       ["mask.padding_trained", "targets.constant", "mask.empty"], "mask.loss", symptom="flat-loss")
def _loss_mask_inverted(p: SymbolicBedPipeline) -> None:
    def targets_from(ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        # Bug: the padding mask is read with the other convention (True on padding, as
        # `key_padding_mask` wants it) and the ignore index is written where it is False, i.e. on
        # every real token: nothing but the padding's few positions reach the loss.
        targets = torch.full_like(ids, IGNORE)
        targets[:, :-1] = ids[:, 1:].masked_fill(padding[:, 1:], IGNORE)
        return targets

    p.targets_from = targets_from  # type: ignore[method-assign]


@fault("loss_mask_from_bar_count", "flat_loss", "the valid loss mask is nearly empty", FLAT,
       ["mask.empty"], "mask.loss", symptom="flat-loss")
def _loss_mask_from_bar_count(p: SymbolicBedPipeline) -> None:
    def targets_from(ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        # Bug: the valid lengths come from the data module's `len(window)`, which counts the
        # window's bars (1), and are used as token counts: each sequence keeps one target of ~50.
        lengths = torch.full((ids.shape[0], 1), p.cfg.window_bars)
        keep = torch.arange(ids.shape[1] - 1)[None, :] < lengths
        targets = torch.full_like(ids, IGNORE)
        targets[:, :-1] = ids[:, 1:].masked_fill(~(keep & padding[:, 1:]), IGNORE)
        return targets

    p.targets_from = targets_from  # type: ignore[method-assign]


# ---- non-finite values ------------------------------------------------------------------------------------

@fault("kl_loss_log_of_zero", "nonfinite", "logarithm of zero", "NaN and infinite values",
       ["nonfinite.loss", "nonfinite.first"], "loss", symptom="nan")
def _kl_loss_log_of_zero(p: SymbolicBedPipeline) -> None:
    smoothing = 0.0  # label smoothing, switched off for this run

    def kl_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Bug: the loss is a KL to smoothed one-hot targets written out by hand,
        # `sum(q * (log q - log p))`; with the smoothing at 0 most q are exactly 0 and 0 * log 0 is
        # NaN. (`F.kl_div` or `xlogy` define 0 * log 0 = 0; the hand-written formula does not.)
        keep = targets != IGNORE
        v = logits.shape[-1]
        q = torch.full((int(keep.sum()), v), smoothing / v)
        q.scatter_(1, targets[keep][:, None], 1.0 - smoothing + smoothing / v)
        logp = logits[keep].float().log_softmax(dim=-1)
        return (q * (q.log() - logp)).sum(dim=-1).mean()

    def step(model: SymbolicLM, batch: SymBatch, tap: Any = _no_tap) -> StepOutput:
        from signalchain import StepOutput

        ids, padding = p.prepare(batch, tap)
        memory, memory_mask = p.condition(model, list(batch.captions), batch.seed, tap)
        targets = p.targets_from(ids, padding)
        tap("targets", targets, ignore_index=IGNORE, cardinality=len(p.tokenizer), shift=1)  # as the bed taps it
        mask = targets != IGNORE
        tap("mask.loss", mask)
        logits = model(ids, padding, memory, memory_mask)
        tap("logits", logits)
        loss = kl_loss(logits, targets)
        tap("loss", loss)
        return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask, extras={"padding_mask": padding})

    p.step = step  # type: ignore[method-assign]
