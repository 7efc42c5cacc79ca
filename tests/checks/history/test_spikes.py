"""`history.loss_spike` against the curve's own noise: found on a heavy-tailed curve, silent on its
ordinary excursions, info on a handful of points."""

from __future__ import annotations

import numpy as np

from _history_curves import build, clean_base
from signalchain.checks.history import judge
from signalchain.checks.history.spikes import spike_threshold


def _spikes(run):
    return [f for f in judge(run) if f.id == "history.loss_spike"]


def test_a_spike_on_a_heavy_tailed_curve_is_found_at_its_step() -> None:
    run, a = clean_base()
    a["loss"] = (3.0 + 3.0 * np.exp(-np.arange(400) / 100)) * np.exp(0.05 * np.random.default_rng(8).standard_t(5, 400))
    assert _spikes(build(run, a)) == []  # its own excursions are no spike
    a["loss"][260] *= 5
    (f,) = _spikes(build(run, a))
    assert f.evidence["step"] == 261 and f.evidence["recovered"] is True


def test_the_threshold_grows_with_the_curve_s_own_noise() -> None:
    rng = np.random.default_rng(9)
    quiet = 3.0 * np.exp(rng.normal(0, 0.02, 400))
    loud = 3.0 * np.exp(rng.normal(0, 0.2, 400))
    assert spike_threshold(quiet, 20) == np.log(1.5)  # never under a 1.5x jump
    assert spike_threshold(loud, 20) > 1.5  # about 10 sigmas of 0.2


def test_a_spike_on_a_handful_of_points_is_info() -> None:
    run, a = clean_base(n=20)
    a["loss"][12] *= 4
    (f,) = _spikes(build(run, a))
    assert f.severity.value == "info" and f.evidence["step"] == 13
