"""Candidate "fixes" for the verify tests, written as a user would: the reference pipeline through its
public API (`ReferencePipeline().with_faults(...)`, methods replaced on the instance), named on the
command line by path spec (`tests/experiments/verify_pipelines.py:masked_nan`).

Each factory is a state `signalchain verify` compares with a failing one:

- `fixed_flat`: the real fix of `zero_grad_before_step` (the reference's own loop);
- `masked_nan`: `kl_soft_targets_log_zero` left in place, its loss passed through `torch.nan_to_num`
  (the run "stops producing NaN"; the 0 * log 0 is still computed);
- `skip_nonfinite_nan`: the same NaN source, the update skipped when the gradient norm is not finite
  (gradient clipping with a guard: the weights stay finite, the source is untouched);
- `flat_fixed_captions_dropped`: the flat loss fixed, but the captions read from a missing field.
"""

from __future__ import annotations

import torch

from signalchain.reference import ReferencePipeline


def fixed_flat() -> ReferencePipeline:
    return ReferencePipeline()


def _nan_source() -> ReferencePipeline:
    return ReferencePipeline().with_faults(["kl_soft_targets_log_zero"])


def masked_nan() -> ReferencePipeline:
    p = _nan_source()
    compute_loss = p.compute_loss

    def nan_to_num_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor):
        loss, per_codebook = compute_loss(logits, targets, mask)
        # The "fix": the loss is NaN, so replace NaN by 0. Training no longer diverges; nothing is learnt.
        return torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0), per_codebook

    p.compute_loss = nan_to_num_loss  # type: ignore[method-assign]
    return p


def skip_nonfinite_nan() -> ReferencePipeline:
    p = _nan_source()

    def train_step(model, optimizer, batch, tap=lambda stage, value, **meta: value):
        model.train()
        out = p.step(model, batch, tap)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), p.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        # The "fix": clip, and skip the update whenever the clipped norm is not finite.
        if torch.isfinite(grad_norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out

    p.train_step = train_step  # type: ignore[method-assign]
    return p


def flat_fixed_captions_dropped() -> ReferencePipeline:
    return ReferencePipeline().with_faults(["caption_key_missing"])


def clean_flat_failing() -> ReferencePipeline:
    """A "failing state" that does not fail: the reference with no fault."""
    return ReferencePipeline()


class PlainLoop:
    """A user's own small unconditional token model: no captions, no loader, no audio; only the protocol.

    `soft_kl=True` writes the loss as a KL against one-hot targets, `t * (log t - log p)`: the zeros of
    `t` make 0 * log 0 = NaN. The fix is the cross-entropy it meant. `signalchain verify --symptom nan`
    on it has no control to run: the conditioning family needs a caption, and this model has none.
    """

    name = "plain-loop"
    card = 16

    def __init__(self, soft_kl: bool = False):
        self.soft_kl = soft_kl

    def golden_batch(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.card, (4, 1, 24), generator=g)  # [B, K=1, T]

    def build_model(self, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Embedding(self.card, 16), torch.nn.Linear(16, self.card))

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, model, batch, tap=lambda stage, value, **meta: value):
        tokens = tap("tokens", batch, cardinality=self.card)
        inputs, targets = tokens[..., :-1], tokens[..., 1:]
        tap("targets", targets)
        mask = tap("mask.loss", torch.ones_like(targets, dtype=torch.bool))
        logits = tap("logits", model(inputs))  # [B, 1, T-1, V]
        logp = torch.log_softmax(logits, -1)
        if self.soft_kl:
            t = torch.nn.functional.one_hot(targets, self.card).float()
            loss = (t * (t.log() - logp)).sum(-1)[mask].mean()
        else:
            loss = torch.nn.functional.nll_loss(logp[mask], targets[mask])
        tap("loss", loss)
        return {"loss": loss, "logits": logits, "targets": targets, "mask": mask}


def plain_nan() -> PlainLoop:
    return PlainLoop(soft_kl=True)


def plain_fixed() -> PlainLoop:
    return PlainLoop()
