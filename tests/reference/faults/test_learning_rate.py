"""The learning-rate faults: oscillation and divergence, parameter explosion, an early spike.

Each is measured on the loss curve and the gradient norm of a few steps on one golden batch,
against the clean run, never through a detector.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import catalogue, get_fault
from signalchain.trace.vocabulary import stage_info

torch.set_num_threads(1)

SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=64, layers=1, warmup_steps=1)
NAMES = {"lr_too_large", "lr_schedule_explodes", "no_warmup_large_lr"}
GOLDEN = ReferencePipeline(SMALL).golden_batch(0)  # the faults change the optimiser, not the data
STEPS = 16


def _run(name: str | None, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Loss and gradient norm per step, and the learning rate each step used."""
    p = ReferencePipeline(SMALL, faults=[name] if name else [])
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    losses, norms, lrs = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a diverging run may warn about non-finite norms
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            out = p.train_step(model, opt, GOLDEN)
            losses.append(float(out.loss.detach()))
            norms.append(out.extras["grad_norm"])
    return np.array(losses), np.array(norms), lrs


@pytest.fixture(scope="module")
def clean() -> tuple[np.ndarray, np.ndarray, list[float]]:
    return _run(None)


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    assert NAMES <= {f.name for f in catalogue("learning_rate")}
    for name in NAMES:
        f = get_fault(name)
        assert f.section == "Learning rate problems" and f.cause and f.symptom == "unstable"
        assert f.expected_ids and stage_info(f.expected_stage) is not None


def test_the_clean_run_falls_steadily(clean: tuple[np.ndarray, np.ndarray, list[float]]) -> None:
    losses, norms, _ = clean
    assert np.all(np.diff(losses) < 0) and losses[-1] < losses[0] - 1.5
    assert norms.max() < 2.0


def test_lr_too_large_diverges() -> None:
    # The property the detectors use: the loss ends higher than it started and far above it at
    # its worst. The exact up/down wiggle of a diverging run is chaotic and differs across CPUs.
    losses, _, lrs = _run("lr_too_large", 8)
    assert lrs[0] >= 0.1
    finite = losses[np.isfinite(losses)]
    assert not np.isfinite(losses).all() or (finite.max() > 2 * losses[0] and losses[-1] > losses[0])


def test_lr_schedule_explodes_the_gradients() -> None:
    losses, norms, lrs = _run("lr_schedule_explodes")
    assert lrs[-1] > 1000 * lrs[0]  # the schedule grows instead of decaying
    late = norms[-1] if np.isfinite(norms[-1]) else np.inf
    assert late > 100 * norms[0]
    assert not np.isfinite(losses[-1]) or losses[-1] > 10 * losses[0]


def test_no_warmup_large_lr_spikes_early_then_recovers(clean: tuple[np.ndarray, np.ndarray, list[float]]) -> None:
    losses, norms, lrs = _run("no_warmup_large_lr", 8)
    assert lrs[0] == pytest.approx(2e-2)  # full rate from the first update: no warm-up
    assert losses[:4].max() > losses[0] + 0.3  # the spike
    assert norms[:4].max() > 3 * clean[1][:4].max()
    assert losses[-1] < losses[0] - 1.0  # then it trains
    assert clean[0][:4].max() <= clean[0][0]


def test_no_warmup_large_lr_removes_the_warmup_of_the_default_config() -> None:
    p = ReferencePipeline(RefConfig(), faults=["no_warmup_large_lr"])
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-2)
    clean = ReferencePipeline(RefConfig())
    assert clean.build_optimizer(clean.build_model(0)).param_groups[0]["lr"] < 2e-3
