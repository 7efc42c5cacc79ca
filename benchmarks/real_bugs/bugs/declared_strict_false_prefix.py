"""A "fine-tune" whose checkpoint never loads: `load_state_dict(..., strict=False)` with prefixed keys.

pytorch/examples#1029: the reporter loaded a Lightning checkpoint whose keys carry the LightningModule's
attribute prefix (`model.`) into the bare model with `strict=False`; no key matched, nothing loaded,
no error was raised, and the model's output was nonsense. The fix: strip the `model.` prefix and load
with `strict=True`. Reproduced in a reference-pipeline fine-tune: the pretrained weights are saved
the way a LightningModule's checkpoint holds them (`{"state_dict": {"model.<name>": ...}}`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.zoo.pretrained import pretrained_state
from signalchain.reference.zoo.reference import REF_PRETRAIN

BUG = RealBug(
    name="declared_strict_false_prefix", thread="https://github.com/pytorch/examples/issues/1029",
    library="torch / lightning", idiom="fine-tune from a Lightning checkpoint, own reference pipeline",
    cls="declared-vs-done",
    cause="load_state_dict(strict=False) of a checkpoint whose keys carry a 'model.' prefix: 0 keys load, "
          "the 'fine-tune' starts from a random init",
    fix="strip the 'model.' prefix and load with strict=True",
    stages=("loss",), cause_ids=("model.not_pretrained", "loss.initial"), symptom="flat-loss")


def lightning_checkpoint() -> dict[str, Any]:
    """What `trainer.save_checkpoint` wrote for a LightningModule holding the network as `self.model`."""
    state, _ = pretrained_state(REF_PRETRAIN)
    return {"epoch": 3, "global_step": 300, "state_dict": {f"model.{k}": v for k, v in state.items()}}


class FineTune(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.name = "finetune-from-lightning-ckpt"

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        ckpt = lightning_checkpoint()
        if self.fixed:
            state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
            model.load_state_dict(state, strict=True)
        else:
            # "strict=False because the checkpoint also has the optimizer and callbacks in it"
            model.load_state_dict(ckpt["state_dict"], strict=False)
        return model


def pipeline(fixed: bool) -> FineTune:
    return FineTune(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """Does the built model equal a fresh random init, and is its first loss at ln(cardinality)?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    fresh = ReferencePipeline().build_model(0)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    model.eval()
    with torch.no_grad():
        loss = float(p.step(model, p.golden_batch(0)).loss)
    ln_v = math.log(p.codec.cardinality)
    return same, f"weights equal to a fresh init: {same}; first loss {loss:.3f} (ln V = {ln_v:.3f})"
