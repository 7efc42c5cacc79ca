"""The optimisation family on conventions clean pipelines use by design, each with the fault it must
still find beside it: a relative-step Adafactor (lr None), LoRA adapters on a frozen pretrained base
(B initialised to zero, so A's first gradient is zero), fp16 with a GradScaler, and SGD whose update
rounds away on one parameter only. Pipelines are written here (a user's small model, tests/rate_pipeline.py)
or are the reference bed."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rate_pipeline import RatePipeline
from signalchain.checks.optimisation.adapters import adapter_pairs
from signalchain.checks.optimisation.gradients import judge_gradients, judge_update
from signalchain.checks.optimisation.sweep import judge_sweep
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import run_doctor
from signalchain.experiments.optimisation.gradients import measure_gradients
from signalchain.experiments.optimisation.lr_sweep import measure_lr_sweep
from signalchain.experiments.optimisation.update import measure_update
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline

torch.set_num_threads(1)


def ctx_of(pipeline: Any, seed: int = 0) -> Context:
    return Context(ProtocolView(pipeline), seed=seed, budget=BUDGETS["economy"])


def loud(findings) -> list[tuple[str, str]]:
    return sorted((f.id, f.severity.value) for f in findings if f.severity.value != "info")


def by_id(findings, fid: str) -> list:
    return [f for f in findings if f.id == fid]


# ---- transformers' Adafactor with its relative step: lr None -------------------------------------

class RelativeAdafactor(RatePipeline):
    """transformers' documented Adafactor default: the rate is min(1e-2, 1/sqrt(step)) times each
    tensor's RMS, computed inside step(); every group's lr is None."""

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        from transformers.optimization import Adafactor

        return Adafactor(model.parameters(), lr=None, relative_step=True, scale_parameter=True, warmup_init=False)


def test_a_relative_step_is_measured_from_the_update_it_makes() -> None:
    u = measure_update(ctx_of(RelativeAdafactor()))
    assert u.configured_lr == [None] and u.effective_lr == [None]
    (g,) = u.groups
    assert g.configured_lr is None and g.ratio is not None and g.ratio > 0  # the realised update, read


def test_a_relative_step_is_not_swept_and_says_why() -> None:
    sweep = measure_lr_sweep(ctx_of(RelativeAdafactor()))
    assert sweep.lrs == [] and sweep.extra["own_rate"] == "Adafactor"
    (f,) = judge_sweep(sweep)
    assert f.id == "optim.lr_sweep_skipped" and f.severity.value == "info"
    assert "relative_step=True" in f.message and "Adafactor" in f.message


def test_a_relative_step_adafactor_gets_no_error_nor_crash() -> None:
    found = run_doctor(RelativeAdafactor(), families=["optimisation"], budget="economy", seed=0).findings
    assert not [f for f in found if f.id == "internal.check_failed"]
    assert not [f for f in found if f.severity.value == "error"], loud(found)


# ---- LoRA on a frozen, pretrained base ----------------------------------------------------------

class Lora(RatePipeline):
    """A pretrained start, peft's LoRA (r 4) on both Linear layers, everything else frozen: the
    dreambooth-style recipe. `zero_a`: the bug of initialising both factors to zero."""

    def __init__(self, zero_a: bool = False, adapters: bool = True, **kw: Any) -> None:
        super().__init__(lr=2e-4, pretrained=True, **kw)
        self.zero_a, self.adapters = zero_a, adapters

    def build_model(self, seed: int) -> nn.Module:
        model = super().build_model(seed)
        for q in model.parameters():
            q.requires_grad_(False)
        if not self.adapters:  # the adapters were never added, the freeze stayed: only the norm trains
            model[3].requires_grad_(True)
            return model
        from peft import LoraConfig, inject_adapter_in_model

        inject_adapter_in_model(LoraConfig(r=4, lora_alpha=8, target_modules=["1", "4"], lora_dropout=0.0), model)
        for name, q in model.named_parameters():
            q.requires_grad_("lora_" in name)
            if self.zero_a and "lora_A" in name:
                nn.init.zeros_(q)
        return model


def test_lora_adapters_are_recognised_from_their_shapes() -> None:
    r = measure_gradients(ctx_of(Lora()))
    pairs = adapter_pairs(r.params)
    assert len(pairs) == 2 and {p.rank for p in pairs} == {4}
    for p in pairs:  # B [out, r] · A [r, in] has the shape of the frozen weight beside them
        assert (p.b.shape[0], p.a.shape[1]) == p.base.shape and not p.base.requires_grad


def test_lora_frozen_base_and_zero_initialised_b_are_info_with_their_evidence() -> None:
    r = measure_gradients(ctx_of(Lora()))
    zero = [q.name for q in r.params if q.requires_grad and q.grad == "zero"]
    assert zero and all("lora_A" in n for n in zero)  # B = 0 at init: dL/dA = 0 at the first step
    assert all(r.zero_partners[n] == [n.replace("lora_A", "lora_B")] for n in zero)
    found = judge_gradients(r)
    assert loud(found) == []
    (frozen,) = by_id(found, "optim.param_frozen")
    assert frozen.evidence["role"] == "adapters" and frozen.evidence["pairs"] == 2
    (z,) = by_id(found, "grad.zero")
    assert z.severity.value == "info" and "lora_B" in z.message


def test_both_factors_zero_is_still_a_zero_gradient_warning() -> None:
    found = judge_gradients(measure_gradients(ctx_of(Lora(zero_a=True))))
    # A = 0 and B = 0: each factor's gradient is zero and neither moves off zero: a saddle forever
    assert ("grad.zero", "error") in loud(found) or ("grad.zero", "warning") in loud(found)


def test_a_frozen_base_without_adapters_is_still_a_warning() -> None:
    found = judge_gradients(measure_gradients(ctx_of(Lora(adapters=False))))
    assert ("optim.param_frozen", "warning") in loud(found)


def test_lora_on_a_pretrained_start_gets_no_error_nor_warning_from_the_family() -> None:
    found = run_doctor(Lora(), families=["optimisation"], budget="economy", seed=0).findings
    assert loud(found) == []


# ---- fp16 autocast with a GradScaler ------------------------------------------------------------

def test_the_gradient_reach_backward_uses_the_runs_loss_scale() -> None:
    r = measure_gradients(ctx_of(ReferencePipeline(RefConfig(amp="fp16", batch_size=4))))
    assert r.loss_scale == 65536.0
    assert [q.name for q in r.params if q.requires_grad and q.grad == "zero"] == []


# ---- SGD: an update that rounds away on one parameter ----------------------------------------------

class TinyGain(nn.Module):
    """A gain near 1 whose gradient is ~1e-9 of the others' (a LayerNorm gain the loss barely reads)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (1 + 1e-9 * (self.weight - 1))


class SgdTinyGain(RatePipeline):
    def __init__(self) -> None:
        super().__init__(opt="sgd", lr=1e-3, weight_decay=0.0)

    def build_model(self, seed: int) -> nn.Module:
        model = super().build_model(seed)
        return nn.Sequential(*model[:4], TinyGain(model[4].in_features), model[4])


def test_an_update_rounded_away_on_one_parameter_is_no_skipped_step() -> None:
    u = measure_update(ctx_of(SgdTinyGain()))
    assert u.had_grad["4.weight"] and u.changed["4.weight"] == 0  # bit-identical: lr·|g| < ulp(1)/2
    assert u.below_resolution == ["4.weight"]  # that tensor alone, not its group
    assert [n for n, c in u.changed.items() if c > 0]
    assert judge_update(u) == []


# ---- classifier-free dropout that drops every caption of the batch --------------------------------

def _all_dropped(rate: float):
    from signalchain.reference.symbolic import SymbolicBedConfig, SymbolicBedPipeline

    class AllDropped(SymbolicBedPipeline):
        """Batch 1 whose one caption the dropout drew (p = 0.1: one update in ten does this)."""

        def drop_conditions(self, captions, rng):
            self.cond_dropout = rate
            return [""] * len(captions), torch.ones(len(captions), dtype=torch.bool)

    return AllDropped(SymbolicBedConfig(batch_size=1))


def test_a_batch_whose_every_caption_was_dropped_explains_the_encoders_zero_gradient() -> None:
    r = measure_gradients(ctx_of(_all_dropped(0.1)))
    assert r.condition_dropped == [True] and r.condition_rate == 0.1
    zero = {q.name for q in r.params if q.requires_grad and q.grad == "zero"}
    assert zero and zero <= set(r.condition_params)  # the text encoder: its output is not read
    found = judge_gradients(r)
    assert loud(found) == []
    (z,) = by_id(found, "grad.zero")
    assert z.severity.value == "info"
    assert "dropped all 1 of its captions" in z.message and "one update in 10" in z.message


def test_a_dropout_rate_of_one_does_not_explain_it() -> None:
    found = judge_gradients(measure_gradients(ctx_of(_all_dropped(1.0))))
    assert {fid for fid, _ in loud(found)} == {"grad.zero"}
