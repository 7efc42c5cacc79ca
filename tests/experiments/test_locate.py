"""The locator: replay a step under the op-level watch and name the first op that made a non-finite value.

Bugs are written here, each differently from the catalogue's, on the reference pipeline (through
`ProtocolView`, so nothing but the protocol is visible) and on a tiny pipeline of our own.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from signalchain import StepOutput, tap
from signalchain.checks.numerics import judge_locate
from signalchain.checks.numerics_causes import likely_cause
from signalchain.experiments.numerics.locate import locate
from signalchain.experiments.numerics.state import Snapshot
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline

torch.set_num_threads(1)
SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=64, layers=1, warmup_steps=1)


def replay(pipeline, seed: int = 0, update: bool = False):
    p = ProtocolView(pipeline)
    batch = p.golden_batch(seed)
    model = p.build_model(seed)
    opt = p.build_optimizer(model) if update else None
    snap = Snapshot.take(model, opt, getattr(p, "scaler", None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return locate(p, model, batch, opt, restore=lambda: snap.restore(model, opt))


def first_born(report):
    return next(e for e in report.events if e.kind == "born")


# ---- bugs written for these tests ---------------------------------------------------------------

class TokenPriorPenalty(ReferencePipeline):
    """A 'token prior' regulariser computed without gradient: sum(f log f) over code frequencies —
    0·log 0 = NaN for every code that never occurs. The loss is NaN, yet no backward op returns NaN."""

    def compute_loss(self, logits, targets, mask):
        loss, per_codebook = super().compute_loss(logits, targets, mask)
        with torch.no_grad():
            freq = torch.bincount(targets.flatten(), minlength=logits.shape[-1]).float() / targets.numel()
            penalty = (freq * freq.log()).sum()
        return loss + 0.01 * penalty, per_codebook


class PeakNormalisedCondition(ReferencePipeline):
    """The condition divided by its per-slot peak: masked slots are all zero, 0 / 0."""

    def condition(self, model, batch, tap):
        cond, mask = super().condition(model, batch, lambda s, v, **m: v)
        cond = cond / cond.abs().amax(-1, keepdim=True)
        tap("condition.embedding", cond)
        return cond, mask


class ProximalPenalty(ReferencePipeline):
    """A proximal term: the per-position L2 distance of the logits to a frozen copy of themselves,
    written by hand as sqrt(sum of squares). The forward is finite (sqrt 0 = 0); the backward of the
    sqrt divides by 0 and 0 · inf = NaN reaches every head. (torch.linalg.norm would guard it.)"""

    def compute_loss(self, logits, targets, mask):
        loss, per_codebook = super().compute_loss(logits, targets, mask)
        distance = (logits - logits.detach()).float().pow(2).sum(-1).sqrt()  # [B, K, T], all 0
        return loss + 0.1 * distance.mean(), per_codebook


class NanOutsideMask(ReferencePipeline):
    """AudioCraft's way: logits filled with NaN where the loss mask is False, loss on valid positions only."""

    def compute_loss(self, logits, targets, mask):
        ce = nn.functional.cross_entropy(logits[mask].float(), targets[mask])
        return ce, ce.repeat(targets.shape[1])

    def step(self, model, batch, tap=lambda s, v, **m: v):
        def filling_tap(stage, value, **meta):
            return tap(stage, value, **meta)

        out = super().step(model, batch, self._fill(filling_tap))
        return out

    def _fill(self, tap):
        state = {}

        def t(stage, value, **meta):
            if stage == "logits":
                state["logits"] = value
                return value
            if stage == "mask.loss":
                filled = state["logits"].masked_fill(~value[..., None], float("nan"))
                tap("logits", filled)
            return tap(stage, value, **meta)

        return t


class RefusesNaN(ReferencePipeline):
    """Divides by a per-example scale that is 0 for a silent example, then refuses the NaN and raises."""

    def condition(self, model, batch, tap):
        cond, mask = super().condition(model, batch, tap)
        scale = torch.zeros(cond.shape[0], 1, 1)
        cond = cond / scale
        if not torch.isfinite(cond).all():
            raise ValueError("condition is not finite")
        return cond, mask


# ---- tests --------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_clean_reference_has_no_first_nonfinite_value(seed: int) -> None:
    report = replay(ReferencePipeline(SMALL), seed)
    assert report.error is None and report.grads_nonfinite == []
    assert [e for e in report.events if e.kind != "fill"] == []  # -inf attention masks are deliberate fills
    assert judge_locate(report) == []


def test_a_forward_nan_that_detect_anomaly_misses_is_located() -> None:
    p = TokenPriorPenalty(SMALL)
    model = p.build_model(0)
    batch = p.golden_batch(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(check_nan=True):
            loss = p.step(model, batch).loss
            loss.backward()  # no backward op returns NaN: detect_anomaly stays silent
    assert torch.isnan(loss)
    report = replay(TokenPriorPenalty(SMALL))
    ev = first_born(report)
    assert ev.op == "aten.log.default" and ev.phase == "forward" and ev.stage == "loss"
    assert likely_cause(ev)[0] == "log_domain"
    ids = {(f.id, f.stage) for f in judge_locate(report)}
    assert ("nonfinite.first", "loss") in ids and ("nonfinite.loss", "loss") in ids


def test_division_by_zero_in_the_forward_is_named_with_its_stage() -> None:
    report = replay(PeakNormalisedCondition(SMALL))
    ev = first_born(report)
    assert ev.op.startswith("aten.div") and ev.stage == "condition.embedding" and ev.module == ""
    assert ev.location and ev.location.endswith(".py:" + ev.location.rsplit(":", 1)[1])
    assert likely_cause(ev)[0] == "division_by_zero"
    (first, *_) = judge_locate(report)
    assert (
        first.id == "nonfinite.first" and first.stage == "condition.embedding" and "division by zero" in first.message
    )


def test_a_nan_born_in_the_backward_is_named_by_its_forward_op() -> None:
    report = replay(ProximalPenalty(SMALL))
    assert all(s.nan + s.inf == 0 for s in report.stages)  # the forward is finite
    ev = first_born(report)
    assert ev.phase == "backward" and "sqrt" in (ev.forward_op or "")
    assert ev.stage == "loss" and likely_cause(ev)[0] == "division_by_zero"
    assert any(n.startswith("heads.") for n in report.grads_nonfinite)
    (first,) = judge_locate(report)
    assert (first.id, first.stage) == ("nonfinite.first", "loss") and "backward" in first.message


def test_nan_only_outside_the_loss_mask_is_not_an_error() -> None:
    report = replay(NanOutsideMask(SMALL))
    logits = report.stage("logits")
    assert logits.nan > 0 and logits.masked_out_only
    assert report.loss is not None and report.loss == report.loss
    assert judge_locate(report) == []


def test_a_step_that_raises_after_the_nan_keeps_what_came_before() -> None:
    report = replay(RefusesNaN(SMALL))
    assert report.error and "condition is not finite" in report.error
    ev = first_born(report)
    assert ev.op.startswith("aten.div") and ev.inputs[1]["zero_fraction"] == 1.0
    assert "condition.embedding" in [s.name for s in report.stages]
    assert judge_locate(report)[0].id == "nonfinite.first"


def test_an_update_that_writes_nan_is_located_in_the_optimizer() -> None:
    class ZeroEpsAdam(ReferencePipeline):  # not the catalogue's: Adam built with eps=0 and no weight decay
        def build_optimizer(self, model):
            return torch.optim.Adam(model.parameters(), lr=1e-3, eps=0.0)

    report = replay(ZeroEpsAdam(SMALL), update=True)
    ev = first_born(report)
    assert ev.phase == "optimizer" and ev.stage == "optimizer" and ev.target in report.params_nonfinite_after
    assert likely_cause(ev)[0] == "division_by_zero"  # sqrt(v) + 0 = 0 where a gradient was 0
    assert judge_locate(report)[0].id == "nonfinite.state"


# ---- a pipeline of our own, far from the reference ------------------------------------------------

class TinyPipeline:
    name = "tiny"

    def __init__(self, bug: str | None = None):
        self.bug = bug

    def golden_batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(6, 5, generator=g)
        x[2] = 0.0  # a constant example: its std is 0
        return {"x": x, "y": torch.randint(0, 3, (6,), generator=g)}

    def build_model(self, seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))

    def build_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model, batch, tap=tap):
        x = batch["x"]
        std = x.std(-1, keepdim=True)
        x = (x - x.mean(-1, keepdim=True)) / (std if self.bug == "std" else std + 1e-5)
        tap("features", x)
        logits = tap("logits", model(x))
        if self.bug == "exp":
            logits = logits * torch.exp(torch.tensor(120.0))
        loss = tap("loss", nn.functional.cross_entropy(logits, batch["y"]))
        return StepOutput(loss=loss, logits=logits)


@pytest.mark.parametrize("bug, op, stage, cause", [("std", "div", "features", "division_by_zero"),
                                                    ("exp", "exp", "loss", "exp_overflow")])
def test_tiny_pipeline_bugs_are_located(bug: str, op: str, stage: str, cause: str) -> None:
    p = TinyPipeline(bug)
    model = p.build_model(0)
    report = locate(p, model, p.golden_batch(0))
    ev = first_born(report)
    assert ev.op.startswith(f"aten.{op}") and ev.stage == stage and likely_cause(ev)[0] == cause


def test_a_nan_the_code_repairs_in_place_is_transient() -> None:
    """torch's own norm backward divides by a zero norm, then masks the NaN away: not a finding."""
    class NormPenalty(ReferencePipeline):
        def compute_loss(self, logits, targets, mask):
            loss, per_codebook = super().compute_loss(logits, targets, mask)
            return loss + 0.0 * (logits - logits.detach()).float().norm(), per_codebook

    report = replay(NormPenalty(SMALL))
    assert [e.kind for e in report.events if e.phase == "backward"] == ["transient"]
    assert report.grads_nonfinite == [] and judge_locate(report) == []


def test_tiny_pipeline_clean_is_silent() -> None:
    p = TinyPipeline()
    report = locate(p, p.build_model(0), p.golden_batch(0))
    assert report.events == [] and judge_locate(report) == []


class DeadEndThenEmptyMask(ReferencePipeline):
    """T5's relative-position bucket: log(0) = -inf, cast to an integer bucket (a dead end), then a
    loss over an empty mask (the real NaN)."""

    def condition(self, model, batch, tap):
        cond, mask = super().condition(model, batch, tap)
        rel = torch.arange(-3, 4).abs().float()
        bucket = (torch.log(rel / 2) * 4).clamp(min=-8).long()  # -inf for rel = 0, then clamped and cast
        return cond + 0 * bucket.sum(), mask

    def compute_loss(self, logits, targets, mask):
        mask = torch.zeros_like(mask)  # nothing counted: the mean below is 0/0
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
        per = torch.zeros(logits.shape[1])
        return (ce * mask.flatten()).sum() / mask.sum(), per


def test_a_non_finite_value_that_reaches_no_tap_is_a_dead_end_not_the_first() -> None:
    report = replay(DeadEndThenEmptyMask(SMALL))
    ev = first_born(report)
    assert ev is not None and ev.op != "aten.log.default" and ev.reached == "loss"
    assert any(e.kind == "dead end" and e.op == "aten.log.default" for e in report.events)


def test_a_freed_values_address_reused_by_a_new_value_carries_none_of_its_events() -> None:
    """The allocator hands a freed storage's address to the next tensor of its size (how often depends
    on the machine): the new value must not inherit the dead end's lineage, or the dead end would be
    counted as reaching the loss. The reuse is forced here by moving the entry to the new address."""
    from signalchain.probes.non_finite_watch import NonFiniteWatch

    watch = NonFiniteWatch()
    old = torch.full((64,), float("-inf"))
    watch.seed_inputs([("old", old)])
    assert watch._inherited([old]) == (watch.events[0],)  # alive: its values carry its event
    entry = watch._lineage.pop(old.untyped_storage().data_ptr())
    del old
    new = torch.full((64,), float("nan"))
    watch._lineage[new.untyped_storage().data_ptr()] = entry  # what an address reuse looks like
    assert watch._inherited([new]) == ()


# ---- the origin is what reaches the loss or the gradients, with no tap to help --------------------

def _bucket_dead_end() -> torch.Tensor:
    """T5's relative-position bucket: log(0) = -inf on every forward, cast to an integer bucket."""
    rel = torch.arange(-3, 4).abs().float()
    return (torch.log(rel / 2) * 4).clamp(min=-8).long()


def untapped(kind: str):
    """A loop with no `tap` at all: only the loss and the gradients can tell the cause from a dead end."""
    def step(model: nn.Module, batch: dict) -> torch.Tensor:
        x = batch["x"]
        bias = _bucket_dead_end().sum().float() * 0
        logits = model(x[:, :5]) + bias  # column 5 is a pad the model never reads
        if kind == "empty_labels":  # every target ignored, per head, summed as HF's MusicGen sums codebooks
            loss = torch.zeros(())
            for _ in range(3):
                loss += nn.functional.cross_entropy(logits, torch.full_like(batch["y"], -100))
            return loss / 3
        if kind == "where":  # log(0) hidden by `where` in the forward, not in its gradient
            p = torch.softmax(logits, -1)[:, 0]
            keep = batch["y"] != 0
            safe = torch.where(keep, torch.log(p * keep), torch.zeros_like(p))
            return nn.functional.cross_entropy(logits, batch["y"]) - 0.1 * safe.mean()
        return nn.functional.cross_entropy(logits, batch["y"])
    return step


def tiny_batch(inf_row: int | None = None, nan_pad: bool = False) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 6, generator=g)
    if nan_pad:
        x[:, 5] = float("nan")  # a pad column the step never reads
    if inf_row is not None:
        x[inf_row, 1] = float("inf")
    return {"x": x, "y": torch.tensor([0, 1, 2, 0, 1, 2])}


def untapped_replay(kind: str, batch: dict):
    model = TinyPipeline().build_model(0)
    return locate(None, model, batch, step=untapped(kind))


def test_the_verdict_is_the_value_that_reaches_the_loss_not_the_first_non_finite_one() -> None:
    report = untapped_replay("empty_labels", tiny_batch())
    found = {f.id: f for f in judge_locate(report)}
    first = found["nonfinite.first"]
    assert first.evidence["op"].startswith("aten.nll_loss") and first.evidence["cause"] == "empty_reduction"
    assert "ignore index -100" in first.message
    benign = found["nonfinite.benign"]
    assert benign.severity.value == "info" and benign.evidence["op"] == "aten.log.default"


def test_every_term_summed_in_place_carries_its_own_nan_to_the_loss() -> None:
    report = untapped_replay("empty_labels", tiny_batch())
    nll = [e for e in report.events if e.op.startswith("aten.nll_loss")]
    assert len(nll) == 3 and all(e.kind == "born" and e.reached == "loss" for e in nll)


def test_a_log_hidden_by_where_in_the_forward_is_named_by_its_nan_gradient() -> None:
    report = untapped_replay("where", tiny_batch())
    assert report.loss is not None and report.grads_nonfinite
    found = {f.id: f for f in judge_locate(report)}
    assert found["nonfinite.first"].evidence["op"] == "aten.log.default"
    verdict = report.first()
    assert verdict.reached == "gradients" and verdict.location and "test_locate.py" in verdict.location
    assert any(e.kind == "dead end" and e.op == "aten.log.default" for e in report.events)  # the bucket


def test_an_inf_in_the_batch_is_the_input_named_by_its_key_and_row() -> None:
    report = untapped_replay("clean", tiny_batch(inf_row=4))
    found = {f.id: f for f in judge_locate(report)}
    assert "nonfinite.first" not in found
    f = found["nonfinite.input"]
    assert f.severity.value == "error" and f.evidence["batch_key"] == "batch['x']" and f.evidence["examples"] == [4]
    assert f.evidence["inf"] == 1 and "1 inf" in f.message


def test_a_nan_pad_the_step_never_reads_is_benign_beside_the_real_cause() -> None:
    report = untapped_replay("empty_labels", tiny_batch(nan_pad=True))
    found = judge_locate(report)
    assert [f.id for f in found if f.severity.value == "error"] == ["nonfinite.first", "nonfinite.loss"]
    assert any(f.id == "nonfinite.benign" and f.evidence["batch_key"] == "batch['x']" for f in found)


def test_ranges_quoted_in_a_cause_count_the_inputs_infs() -> None:
    """A LayerNorm fed a row of inf: the range of its finite inputs is quoted with the infs beside it."""
    x = torch.randn(4, 128)
    x[1] = float("inf")
    from signalchain.probes.tensors import tensor_stats
    from signalchain.records.numerics import OpEvent
    ev = OpEvent(order=1, kind="born", op="aten.native_layer_norm.default", phase="forward", module="norm",
                 stage=None, dtype="float32", shape=[4, 128], nan=128, inf=0, numel=512,
                 inputs=[tensor_stats(x)], scalars=[1e-5])
    key, why, _ = likely_cause(ev)
    assert key == "normalisation" and "plus 128 inf of 512 values" in why


class LogInItsOwnForward(nn.Module):
    """The root module's own forward (no child) takes log of a value that is 0."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + torch.log(x[:, :1] - x[:, :1])


def test_a_nan_in_the_root_modules_own_forward_is_named_by_its_class_not_outside_any_module() -> None:
    def step(model: nn.Module, batch: dict) -> torch.Tensor:
        return nn.functional.cross_entropy(model(batch["x"]), batch["y"])

    report = locate(None, LogInItsOwnForward(), tiny_batch(), step=step)
    (first, *_) = judge_locate(report)
    assert first.evidence["op"] == "aten.log.default" and first.evidence["module"] == "LogInItsOwnForward"
    assert "module LogInItsOwnForward" in first.message and "outside any module" not in first.message
