"""Every history judge is silent (no warning, no error) on clean runs in every convention, over seeds:
the named conventions below, and any healthy recipe hypothesis draws (`_history_curves.Recipe`)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _history_curves import CONVENTIONS, Recipe, make_run, recipe_run, recipes
from signalchain.checks.history import judge


def _loud(run):
    return [(f.id, f.evidence.get("kind"), f.message) for f in judge(run) if f.severity.value != "info"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_clean_run_raises_nothing(convention: str, seed: int) -> None:
    assert _loud(make_run(convention, seed)) == []


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(recipe=recipes(), seed=st.integers(0, 2**16))
def test_any_healthy_recipe_raises_nothing(recipe: Recipe, seed: int) -> None:
    assert _loud(recipe_run(recipe, seed)) == []


@pytest.mark.parametrize(
    "recipe",
    [
        Recipe(points=20, every=500, eval_every=2, warmup_frac=0.1),  # HF Trainer, logging every 500 steps
        Recipe(points=12, every=100, eval_every=3, lr_kind="linear"),
        Recipe(resume="back", tau_frac=0.1),  # reloaded an earlier checkpoint early in the fall
        Recipe(resume="back", points=60, every=50, eval_every=5),
        Recipe(resume="gap", points=40, every=50, eval_every=5, tau_frac=0.15),
        Recipe(rounding=2, start=3.0, end_frac=0.8),  # a CSV with 2 decimals: valid repeats at the plateau
        Recipe(rounding=2, tau_frac=0.05),
        Recipe(tau_frac=0.02),  # converges in a few points, then flat
        Recipe(start=2.1, end_frac=0.975, lr_kind="constant", warmup_frac=0.0, noise=0.02),  # a gentle fine-tune
        Recipe(valid_factor=0.93, noise=0.1),  # dropout: validation a little below training
        Recipe(with_config=True, lr_kind="wsd"),  # warm-up, stable, decay at the end
        Recipe(with_config=True, warmup_from_zero=True, codebooks=4, fp16_skips=8),
        Recipe(heavy_tails=True, noise=0.15),
        Recipe(points=12, every=10, calibration=True, fp16_skips=8),  # the scaler calibrating at the start
    ],
)
@pytest.mark.parametrize("seed", range(10))
def test_named_healthy_recipes_raise_nothing(recipe: Recipe, seed: int) -> None:
    assert _loud(recipe_run(recipe, seed)) == []
