"""The zeroing and scheduler rules on a second convention (issue 41): a hand-written HF MusicGen
fine-tuning loop (tests/integrations/hf_user_pipeline.py), not the real-bug bed's own-loop
reproductions they were first proven on. Each bug is written here in that pipeline's idiom, beside
its clean twin."""

import sys
from pathlib import Path

import torch

from signalchain.checks.optimisation.grad_rule import judge_schedule_steps, judge_zeroing
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.optimisation.grad_rule import measure_grad_rule
from signalchain.pipeline import ProtocolView

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
from hf_user_pipeline import HFUserPipeline  # noqa: E402


class ZeroAtStart(HFUserPipeline):
    """Clean: zero_grad before backward (the wekws fix), .grad left full after each update."""

    zero = True
    accumulation = 1
    clip_late = False

    def train_step(self, model, optimizer, batch, tap=lambda s, v, /, **m: v):
        model.train()
        if self.zero:
            optimizer.zero_grad()
        out = self.step(model, batch, tap)
        out.loss.backward()
        trained = [p for p in model.parameters() if p.requires_grad]
        if not self.clip_late:
            torch.nn.utils.clip_grad_norm_(trained, 0.05)
        sched = self._sched.get(id(optimizer)) or self._sched.setdefault(
            id(optimizer), torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0))
        optimizer.step()
        for _ in range(self.accumulation):  # the bug: once per micro-batch
            sched.step()
        if self.clip_late:  # the bug: clipped after the update was made
            torch.nn.utils.clip_grad_norm_(trained, 0.05)
        return out

    def __init__(self, **kw):
        super().__init__(**kw)
        self._sched = {}


class NoZeroGrad(ZeroAtStart):
    zero = False


class SchedulerPerMicroBatch(ZeroAtStart):
    accumulation = 4


class ClipAfterStep(ZeroAtStart):
    clip_late = True


def _measure(pipeline):
    return measure_grad_rule(Context(ProtocolView(pipeline), seed=0, budget=BUDGETS["economy"]))


def test_a_gradient_never_zeroed_is_named_and_its_fix_is_silent():
    bug, fixed = _measure(NoZeroGrad()), _measure(ZeroAtStart())
    assert [f.id for f in judge_zeroing(bug)] == ["optim.grad_not_zeroed"]
    assert bug.carry[0] > 0.5  # the marker is most of the second step's gradient
    assert judge_zeroing(fixed) == [] and fixed.carry is not None and abs(fixed.carry[0]) < 0.05
    assert judge_schedule_steps(fixed) == [] and fixed.scheduler_steps == fixed.steps == 1


def test_a_scheduler_stepped_per_micro_batch_is_named():
    m = _measure(SchedulerPerMicroBatch())
    assert (m.scheduler_steps, m.steps) == (4, 1)
    assert [f.id for f in judge_schedule_steps(m)] == ["optim.schedule_too_fast"]


def test_clipping_after_the_step_is_named_and_clipping_before_is_silent():
    from signalchain.checks.optimisation.grad_rule import judge_clip_order

    bug, fixed = _measure(ClipAfterStep()), _measure(ZeroAtStart())
    assert [f.id for f in judge_clip_order(bug)] == ["optim.clip_after_step"] and bug.after_step[1] < 0.9
    assert judge_clip_order(fixed) == [] and fixed.after_step[1] == 1.0


def test_a_bf16_adapter_whose_step_autocasts_its_own_forward_is_silent():
    """The zoo's hf-bf16 (issue 41): the loss's gradient is taken where the update autocasts (the
    forward alone), not around the whole step, which would encode the targets in bf16 too."""
    from signalchain.checks.optimisation.grad_rule import judge_grad_rule
    from signalchain.integrations.hf_musicgen import HFMusicgenPipeline, examples_from_clips
    from signalchain.reference.hf.tiny import bed_clips, tiny_model, tiny_tokenizer

    p = HFMusicgenPipeline(tiny_model, tokenizer=tiny_tokenizer(), data=examples_from_clips(bed_clips(8)),
                           segment_seconds=0.5, batch_size=4, amp="bf16")
    m = _measure(p)
    assert m.cosine > m.floor - 0.05 and judge_grad_rule(m) == []
