"""`model.eval()` before training and never `model.train()`: every update runs with dropout off.

shubhamagarwal92/mmd#14: the training script's `evaluate` calls `model.eval()` to disable dropout,
but training never calls `model.train()` again, so after the first evaluation dropout stays off for
the rest of the run; the fix is a `model.train()` after evaluating (at the start of each training
step). Reproduced in a reference-pipeline fine-tune with dropout 0.1 whose `build_model` checks the
loaded checkpoint with a validation loss under `model.eval()`, and whose own `train_step` never
switches back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.zoo.pretrained import pretrained_state
from signalchain.reference.zoo.reference import REF_PRETRAIN

BUG = RealBug(
    name="declared_eval_mode_training", thread="https://github.com/shubhamagarwal92/mmd/issues/14",
    library="torch", idiom="own loop: evaluate() with model.eval(), train step without model.train()",
    cls="declared-vs-done",
    cause="the model is left in eval mode after a validation pass: dropout (configured 0.1) is off in every update",
    fix="call model.train() at the start of each training step (after evaluating)",
    stages=("logits",), cause_ids=("model.eval_mode_training",), symptom="too-good-validation")


class EvalLeftOn(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__(replace(RefConfig(), dropout=0.1))
        self.fixed = fixed
        self.name = "eval-left-on"

    def evaluate(self, model: Any) -> float:
        model.eval()
        with torch.no_grad():
            return float(self.step(model, self.make_batch(range(512, 520), seed=0)).loss)

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        state, _ = pretrained_state(REF_PRETRAIN)
        model.load_state_dict(state)
        self.last_valid = self.evaluate(model)  # "check the checkpoint loaded"
        return model

    def train_step(self, model: Any, optimizer: Any, batch: Any, tap: Any = None) -> Any:
        if self.fixed:
            model.train()
        out = self.step(model, batch, tap) if tap is not None else self.step(model, batch)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        if tap is not None:
            tap("grad.norm", grad_norm)
        optimizer.step()
        sched = self.scheduler_for(optimizer)
        if sched is not None:
            sched.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> EvalLeftOn:
    return EvalLeftOn(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """During the user's update: is the model in eval mode, and do two forwards of one batch agree exactly
    (dropout off) although the config asks for dropout 0.1?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    batch = p.golden_batch(0)
    modes: list[bool] = []

    def tap(stage: str, value: Any, /, **meta: Any) -> Any:
        if stage == "logits":
            modes.append(model.training)
        return value

    p.train_step(model, opt, batch, tap)
    torch.manual_seed(1)
    a = p.step(model, batch).logits.detach()
    torch.manual_seed(2)
    b = p.step(model, batch).logits.detach()
    identical = bool(torch.equal(a, b))
    off = (not modes[0]) and identical
    return off, f"model.training during the update: {modes[0]}; two forwards identical: {identical} (dropout 0.1)"
