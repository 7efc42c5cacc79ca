"""The optimisation family's verdicts on learning rates, measured on real pipelines: a user's own small
pipeline (tests/rate_pipeline.py, written here) over optimizers, rates and schedules, the reference
pipeline and the HF bed. A rate at which nothing can learn is an error with its numbers; a rate in the
range recipes use (1e-5 … 3e-3) is never an error nor a warning, whatever a short sweep prefers."""

from __future__ import annotations

import pytest
import torch

from rate_pipeline import RatePipeline
from signalchain.checks.optimisation.curves import CAVEAT
from signalchain.checks.optimisation.gradients import judge_update
from signalchain.checks.optimisation.rates import judge_rates
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import run_doctor
from signalchain.experiments.optimisation.update import measure_update
from signalchain.pipeline import ProtocolView
from signalchain.reference import RefConfig, ReferencePipeline

torch.set_num_threads(1)


def family(pipeline, seed: int = 0) -> list:
    return run_doctor(pipeline, families=["optimisation"], budget="economy", seed=seed).findings


def loud(findings) -> list[tuple[str, str]]:
    return sorted((f.id, f.severity.value) for f in findings if f.severity.value != "info")


def rates_of(findings) -> list:
    return [f for f in findings if f.id == "optim.lr_too_small"]


# ---- a user's own small pipeline -------------------------------------------------------------------

def test_at_1e_9_the_updates_are_below_float32_resolution() -> None:
    found = family(RatePipeline(lr=1e-9))
    (f,) = rates_of(found)
    assert (f.severity.value, f.stage) == ("error", "optimizer")
    assert "at the learning rate 1e-09 float32 rounding loses" in f.message and "bit-identical" in f.message
    assert f.evidence["lost"] >= 0.5 and f.evidence["rate"] == 1e-9 and f.evidence["rate_for_99_percent"] > 1e-9
    verdict = next(x for x in found if x.id == "overfit.failed")
    assert "optim.lr_too_small" in verdict.message  # a rate at which nothing learns cuts the update connection
    assert not [x for x in found if x.id == "loss.flat"]  # the rate explains the flat loss


@pytest.mark.parametrize("lam, words", [(lambda s: min(1.0, s // 500), "although the configured rate is 0.003"),
                                        (lambda s: 0.0, "although the configured rate is 0.003")])
def test_a_schedule_at_zero_for_every_step_is_an_error(lam, words) -> None:
    found = family(RatePipeline(lr=3e-3, lr_lambda=lam))
    (f,) = rates_of(found)
    assert f.severity.value == "error" and words in f.message
    assert "at every one of the 33 optimizer steps measured (3 of the update run, 30 of the overfit run)" in f.message
    assert not [x for x in found if x.id == "optim.step_skipped"]  # the step ran; the rate was 0


def test_a_configured_rate_of_zero_is_an_error() -> None:
    (f,) = rates_of(family(RatePipeline(lr=3e-3 * (8 // 256))))  # the linear scaling rule with `//`
    assert f.severity.value == "error" and "the configured learning rate is 0" in f.message


SILENT = {
    "adamw 1e-3 (the issue's user run)": dict(lr=1e-3),
    "adamw 1e-4 fine-tune": dict(lr=1e-4, pretrained=True),
    "adamw 1e-5 fine-tune, linear decay": dict(lr=1e-5, pretrained=True, warmup=100, total=10_000, schedule="linear"),
    "adamw 1e-4, warm-up 4000 + cosine": dict(lr=1e-4, warmup=4000, total=100_000, schedule="cosine"),
    "adam 3e-3": dict(opt="adam", lr=3e-3),
    "sgd momentum 1e-3": dict(opt="sgd", lr=1e-3),
    "adafactor 1e-4, warm-up 500 + cosine": dict(opt="adafactor", lr=1e-4, warmup=500, total=20_000,
                                                 schedule="cosine"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SILENT))
def test_rates_recipes_use_get_no_error_and_no_warning(name: str) -> None:
    found = family(RatePipeline(**SILENT[name]))
    assert loud(found) == []
    for f in rates_of(found):  # what a short run suggests is info, and says what it cannot show
        assert f.severity.value == "info" and CAVEAT in f.message and "raise it towards" not in f.hint


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_the_users_1e_3_pipeline_is_silent_over_seeds(seed: int) -> None:
    assert loud(family(RatePipeline(lr=1e-3), seed)) == []


def test_a_long_warm_up_fails_the_configured_overfit_as_info_only() -> None:
    found = family(RatePipeline(lr=1e-4, warmup=4000, total=100_000, schedule="cosine"))
    (f,) = [x for x in found if x.id == "overfit.configured_rate"]
    assert f.severity.value == "info" and "memorises at lr" in f.message and "(a warm-up)" in f.message
    assert CAVEAT in f.message and f.evidence["schedule_high"] < 1e-5
    assert not [x for x in found if x.id == "overfit.failed"]


# ---- the reference pipeline ------------------------------------------------------------------------

SMALL = dict(batch_size=4, segment_seconds=1.0, dim=32, layers=1)


def _update_verdict(pipeline) -> list:
    u = measure_update(Context(ProtocolView(pipeline), seed=0, budget=BUDGETS["economy"]))
    return judge_rates(u) + judge_update(u)


class Scheduled(ReferencePipeline):
    """The reference with its warm-up replaced by a user's schedule."""

    def __init__(self, cfg: RefConfig, lam):
        super().__init__(cfg)
        self.lam = lam

    def build_optimizer(self, model):
        opt = super().build_optimizer(model)
        self._schedulers[opt] = torch.optim.lr_scheduler.LambdaLR(opt, self.lam)
        return opt


def test_the_reference_at_1e_9_gets_the_error_with_its_numbers() -> None:
    (f,) = [x for x in _update_verdict(ReferencePipeline(RefConfig(lr=1e-9, **SMALL))) if x.severity.value != "info"]
    assert (f.id, f.severity.value) == ("optim.lr_too_small", "error")
    assert "float32 rounding loses" in f.message and f.evidence["lost"] >= 0.5


def test_the_reference_with_a_zero_schedule_gets_the_error() -> None:
    found = _update_verdict(Scheduled(RefConfig(lr=2e-3, **SMALL), lambda s: 0.0))
    assert [(f.id, f.severity.value) for f in found] == [("optim.lr_too_small", "error")]


@pytest.mark.parametrize("lr, lam", [(1e-4, None), (1e-3, None),
                                     (1e-4, lambda s: s / 4000 if s < 4000 else 1.0)])
def test_the_reference_at_recipe_rates_gets_no_rate_error_or_warning(lr, lam) -> None:
    cfg = RefConfig(lr=lr, **SMALL)
    assert loud(_update_verdict(Scheduled(cfg, lam) if lam else ReferencePipeline(cfg))) == []


@pytest.mark.slow
def test_the_reference_with_a_4000_step_warm_up_is_silent() -> None:
    found = family(Scheduled(RefConfig(lr=1e-4, **SMALL), lambda s: s / 4000 if s < 4000 else 1.0))
    assert loud(found) == []
    assert [f.severity.value for f in found if f.id == "overfit.configured_rate"] == ["info"]


# ---- the HF bed at the README's rate ------------------------------------------------------------

def test_the_hf_bed_at_1e_4_gets_no_rate_error() -> None:
    pytest.importorskip("transformers")
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline

    assert loud(_update_verdict(HFBedPipeline(HFBedConfig(lr=1e-4)))) == []


# ---- the catalogues' old "merely small" rates: info now, never an error or a warning ---------------

def _merely_small(bed: str):
    if bed == "reference":  # the old fault: 2e-3 divided by the target tokens of a batch
        cfg = RefConfig(**SMALL)
        p = ReferencePipeline(cfg)
        frames = int(round(cfg.segment_seconds * p.codec.frame_rate))
        p.cfg.lr = cfg.lr / (cfg.batch_size * p.codec.n_codebooks * frames)
        return p
    if bed == "symbolic":  # 3e-3 divided by the tokens of a batch (8 * 256): ≈ 1.5e-6
        from signalchain.reference.symbolic import SymbolicBedConfig, SymbolicBedPipeline

        cfg = SymbolicBedConfig()
        return SymbolicBedPipeline(SymbolicBedConfig(lr=cfg.lr / (cfg.batch_size * cfg.max_len)))
    pytest.importorskip("transformers")
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline

    return HFBedPipeline(HFBedConfig(lr=5e-5))  # the Trainer's default rate on a decoder trained from scratch


@pytest.mark.slow
@pytest.mark.parametrize("bed", ["reference", "symbolic", "hf"])
def test_a_merely_small_rate_gets_info_with_the_caveat(bed: str) -> None:
    found = family(_merely_small(bed))
    assert loud(found) == []
    (f,) = rates_of(found)
    assert f.severity.value == "info" and CAVEAT in f.message and "may be small" in f.message
    assert "-step sweep from one start it lowers the loss by" in f.message or "over 30 updates" in f.message
