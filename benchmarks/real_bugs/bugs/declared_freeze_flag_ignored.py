"""A text encoder declared frozen that trains: the freeze flag is read where it no longer matters.

roboflow/rf-detr#357: `freeze_encoder=True` passed to `model.train(...)` does nothing; the encoder is
frozen only when the flag is given to the constructor, because `requires_grad` is set while the
model is built. The fix: pass the flag where the model is built (the constructor). Reproduced in a
reference-pipeline fine-tune of a pretrained model: the run config says `freeze_text_encoder=True`
for the training call, but `build_model` reads the constructor's default (False), so the pretrained
text encoder is updated at the full learning rate.
"""

from __future__ import annotations

from typing import Any

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.zoo.pretrained import pretrained_state
from signalchain.reference.zoo.reference import REF_PRETRAIN

BUG = RealBug(
    name="declared_freeze_flag_ignored", thread="https://github.com/roboflow/rf-detr/issues/357",
    library="own trainer (rf-detr-style flags)", idiom="fine-tune of a pretrained reference model, freeze flag in train()",
    cls="declared-vs-done",
    cause="freeze_text_encoder=True is given to the training call but requires_grad is set in build_model "
          "from the constructor's default: the 'frozen' text encoder is trained",
    fix="give freeze_text_encoder to the constructor, where the model is built",
    stages=("condition.embedding",), cause_ids=("condition.encoder_trained", "condition.freeze_ignored"),
    symptom="ignores-caption")


class Finetuner(ReferencePipeline):
    def __init__(self, freeze_text_encoder: bool = False):
        super().__init__()
        self.freeze_text_encoder = freeze_text_encoder
        self.train_kwargs: dict[str, Any] = {}
        self.name = "finetune-freeze-flag"

    def train(self, **kwargs: Any) -> Finetuner:
        """The user's entry point: remembers the run settings (the model is built later)."""
        self.train_kwargs = dict(kwargs)
        return self

    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        state, _ = pretrained_state(REF_PRETRAIN)
        model.load_state_dict(state)
        if self.freeze_text_encoder:  # only the constructor's flag is consulted
            model.text_encoder.requires_grad_(False)
        return model


def pipeline(fixed: bool) -> Finetuner:
    if fixed:
        return Finetuner(freeze_text_encoder=True).train(epochs=10)
    return Finetuner().train(epochs=10, freeze_text_encoder=True)


def shows(fixed: bool) -> tuple[bool, str]:
    """After 3 updates: did the text encoder declared frozen move?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    before = [q.detach().clone() for q in model.text_encoder.parameters()]
    loader = p.loader("train", seed=0)
    for _ in range(3):
        p.train_step(model, opt, next(loader))
    moved = max(float((q - b).abs().max()) for q, b in zip(model.text_encoder.parameters(), before))
    declared = bool(p.train_kwargs.get("freeze_text_encoder") or p.freeze_text_encoder)
    return (declared and moved > 0), f"declared frozen: {declared}; text encoder max |change| after 3 steps {moved:.2e}"
