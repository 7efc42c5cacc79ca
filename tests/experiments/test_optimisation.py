"""Optimisation experiments on the reference pipeline, with bugs written here (not the catalogue's),
so that the detectors are proven on implementations they were not tuned to."""

import pytest
import torch

from signalchain.checks.optimisation.curves import judge_overfit, judge_sweep
from signalchain.checks.optimisation.gradients import judge_gradients, judge_update
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.optimisation.gradients import measure_gradients
from signalchain.experiments.optimisation.lr_sweep import measure_lr_sweep
from signalchain.experiments.optimisation.overfit import measure_overfit
from signalchain.experiments.optimisation.update import measure_update
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline

SMALL = RefConfig(batch_size=4)


def ctx_of(pipeline, seed=0):
    return Context(ProtocolView(pipeline), seed=seed, budget=BUDGETS["economy"])


def ids(findings):
    return sorted((f.id, f.stage) for f in findings if f.severity.value != "info")


class DetachedCondition(ReferencePipeline):
    def condition(self, model, batch, tap):
        cond, mask = super().condition(model, batch, lambda s, v, **m: v)
        cond = cond.detach()  # the bug under test
        tap("condition.embedding", cond)
        return cond, mask


class RoundedCondition(ReferencePipeline):
    def condition(self, model, batch, tap):
        cond, mask = super().condition(model, batch, lambda s, v, **m: v)
        cond = (cond * 100).long().float() / 100  # quantised "to save memory"
        tap("condition.embedding", cond)
        return cond, mask


class NoGradEncoder(ReferencePipeline):
    def build_model(self, seed):
        model = super().build_model(seed)
        forward = model.text_encoder.forward

        def frozen_forward(*args, **kwargs):
            with torch.no_grad():
                return forward(*args, **kwargs)

        model.text_encoder.forward = frozen_forward
        return model


class HalfOptimizer(ReferencePipeline):
    def build_optimizer(self, model):
        return torch.optim.AdamW(list(model.blocks.parameters()), lr=self.cfg.lr)


class NeverSteps(ReferencePipeline):
    def train_step(self, model, optimizer, batch, tap=None):
        out = self.step(model, batch)
        out.loss.backward()
        optimizer.zero_grad()  # the step was moved under an accumulation branch that never runs
        return out


@pytest.fixture(scope="module")
def clean_grads():
    return measure_gradients(ctx_of(ReferencePipeline(SMALL)))


def test_clean_gradients_reach_every_parameter(clean_grads):
    assert clean_grads.loss_requires_grad and clean_grads.loss_depends_on_logits
    assert all(q.grad == "ok" for q in clean_grads.params)
    assert clean_grads.breaks == []
    assert ids(judge_gradients(clean_grads)) == []


@pytest.mark.parametrize("cls,fid,kind", [(DetachedCondition, "grad.detached", "detach"),
                                          (RoundedCondition, "dtype.path_broken", "integer cast"),
                                          (NoGradEncoder, "grad.detached", "no_grad")])
def test_a_cut_path_is_named_with_its_stage_op_and_line(cls, fid, kind):
    r = measure_gradients(ctx_of(cls(SMALL)))
    found = judge_gradients(r)
    hit = [f for f in found if f.id == fid]
    assert hit and hit[0].stage == "condition.embedding"
    assert hit[0].evidence["kind"] == kind
    if kind != "no_grad":
        assert "test_optimisation.py" in hit[0].evidence["location"]
    assert any(p.startswith("text_encoder") for p in hit[0].evidence["parameters"])


def test_parameters_missing_from_the_optimizer():
    r = measure_gradients(ctx_of(HalfOptimizer(SMALL)))
    f = [x for x in judge_gradients(r) if x.id == "optim.param_not_in_optimizer"]
    assert f and f[0].stage == "optimizer" and f[0].severity.value == "error"


def test_everything_frozen():
    class Frozen(ReferencePipeline):
        def build_model(self, seed):
            return super().build_model(seed).requires_grad_(False)

    r = measure_gradients(ctx_of(Frozen(SMALL)))
    assert ids(judge_gradients(r)) == [("optim.param_frozen", "model")]


def test_update_moves_parameters_and_a_skipped_step_is_found():
    clean = measure_update(ctx_of(ReferencePipeline(SMALL)))
    assert all(v > 0 for v in clean.changed.values()) and judge_update(clean) == []
    skipped = measure_update(ctx_of(NeverSteps(SMALL)))
    assert ids(judge_update(skipped)) == [("optim.step_skipped", "optimizer")]


def test_overfit_passes_on_the_clean_pipeline_and_fails_without_updates():
    ctx = ctx_of(ReferencePipeline(SMALL))
    curve = measure_overfit(ctx)
    assert curve.losses[-1] < 0.5 * curve.losses[0]
    assert judge_overfit(curve, []) == []
    stuck = measure_overfit(ctx_of(NeverSteps(SMALL)))
    prior = judge_update(measure_update(ctx_of(NeverSteps(SMALL))))
    f = judge_overfit(stuck, prior)
    assert f[0].id == "overfit.failed" and f[0].stage == "optimizer"
    assert "the optimiser updates those parameters" in f[0].evidence["connections"]


@pytest.mark.parametrize("lr,expected", [(2e-3, []), (1e-7, []), (0.8, [("optim.lr_too_large", "optimizer")])])
def test_lr_sweep_places_the_configured_rate_against_divergence_only(lr, expected):
    """A 4-step sweep shows where the loss diverges; a rate below its best is no finding of the sweep's
    (short-horizon bias: over 4 steps larger rates always look better)."""
    s = measure_lr_sweep(ctx_of(ReferencePipeline(RefConfig(batch_size=4, lr=lr))))
    assert ids(judge_sweep(s)) == expected
    assert s.probe_lr is not None and len(s.probe_losses) > 1


def test_an_overfit_that_memorises_at_another_rate_is_connected_and_one_at_no_rate_is_capacity():
    """dim 8 fits one batch at the sweep's best rate but not at the configured one: the path is
    connected (info beside the configured curve, no error); dim 2 fits it at no rate tried (capacity)."""
    from signalchain.checks.optimisation.curves import needs_refit
    from signalchain.experiments.optimisation.overfit import overfit_at

    verdicts = {}
    for dim in (8, 2):
        ctx = ctx_of(ReferencePipeline(RefConfig(batch_size=4, dim=dim, heads=1, layers=1, ffn_mult=1)))
        sweep = measure_lr_sweep(ctx)
        curve = measure_overfit(ctx)
        best = needs_refit(curve, [], sweep)
        assert best is not None and best > sweep.configured
        curve.refit_lrs, curve.refit_losses = [best], [overfit_at(ctx, best)]
        verdicts[dim] = judge_overfit(curve, [], sweep)
    (info,) = verdicts[8]
    assert (info.id, info.severity.value, info.stage) == ("overfit.configured_rate", "info", "optimizer")
    assert "memorises at lr" in info.message and "connected" in info.message
    # dim 2 memorises at no rate tried. Whether its curves have flattened within the budget's steps is
    # the trajectory's business (it differed between two machines of this size): the verdict must
    # follow the shapes the judge measured — a plateau anywhere is capacity (error), curves still
    # falling everywhere are unfinished (info: connected, too few steps to tell)
    [judged] = [f for f in verdicts[2] if "shapes" in f.evidence][:1]
    shapes = [r["shape"] for r in judged.evidence["shapes"]]
    assert "does not memorise" in judged.message and "re-fit at" in judged.message
    if "plateau" in shapes:
        assert ("model.capacity", "model") in ids(verdicts[2]) and ("overfit.failed", "model") in ids(verdicts[2])
    else:
        assert "falling" in shapes and ids(verdicts[2]) == []
        assert [(f.id, f.severity.value, f.stage) for f in verdicts[2]] == [("overfit.unfinished", "info", "model")]
