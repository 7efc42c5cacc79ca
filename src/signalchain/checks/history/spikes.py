"""`history.loss_spike` and `history.grad_explosion`: sudden departures from a curve's own recent level.

A loss spike is a point whose log-loss stands above the median of the points before it by more than
`SPIKE_SIGMAS` times the curve's own point-to-point noise and by at least `SPIKE_RATIO` (a 1.5x jump:
noise alone on a long, smooth curve can be many sigmas of a tiny noise). It *recovered* when, within
the next `window` points, or over the rest of the run (its median afterwards), the loss comes back to
within `SPIKE_RATIO` of its level before; a spike that never comes back is an `error` (the run lost
what it had learned), one that recovers a `warning`.
Only the first spike is reported, with the count of the others.

A gradient explosion is sustained: at least `EXPLODE_POINTS` consecutive finite gradient norms above
`EXPLODE_RATIO` (100x) times the median of the norms before them. One large norm is what clipping is
for and is not reported.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise, prefix_medians, rolling_median_before, window

__all__ = ["judge_spikes", "judge_grad_explosion", "SPIKE_SIGMAS", "SPIKE_RATIO", "EXPLODE_RATIO", "EXPLODE_POINTS"]

CHECK = "checks.history.spikes"
SPIKE_SIGMAS = 8.0
SPIKE_RATIO = 1.5
EXPLODE_RATIO = 100.0
EXPLODE_POINTS = 3


def _spikes(values: np.ndarray, w: int, noise: float) -> list[tuple[int, float, float]]:
    """(position, value, level before) of each spike, positions in `values`."""
    out = []
    logs = np.log(values)
    jump = max(SPIKE_SIGMAS * noise, np.log(SPIKE_RATIO))
    base = rolling_median_before(logs, w)
    nxt = w
    for i in np.nonzero(logs - base > jump)[0]:  # NaN before w compares False
        if i >= nxt:
            out.append((int(i), float(values[i]), float(np.exp(base[i]))))
            nxt = i + w  # one spike, not each of its points
    return out


def judge_spikes(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    if len(vals) < 10 or (vals <= 0).any():
        return []
    w = window(len(vals))
    found = _spikes(vals, w, log_noise(vals))
    if not found:
        return []
    i, value, before = found[0]
    after = vals[i + 1 : i + 1 + w]
    settled = float(np.median(vals[i + 1 :])) if i + 1 < len(vals) else value
    # back within a window, or later: a loss whose level after the spike is the level before it came back
    recovered = (bool(len(after)) and float(np.min(after)) <= before * SPIKE_RATIO) or (
        i + 1 < len(vals) and settled <= before * SPIKE_RATIO
    )
    step = int(steps[i])
    more = f"; {len(found) - 1} more spike(s) later" if len(found) > 1 else ""
    if recovered:
        return [
            make(
                "history.loss_spike",
                "warning",
                s.name,
                f"the training loss spikes to {value:.4g} at {fmt_step(run, step)} ({value / before:.2f}x its level "
                f"{before:.4g} over the {w} points before) and recovers (its median afterwards {settled:.4g}){more}",
                CHECK,
                "a recovered spike is one bad batch or a too-large step: look at that step's batch (a clip of "
                "noise, a caption of a different language, an empty target) and at the gradient norm there; "
                "clipping and a lower peak learning rate make them rarer",
                step=step,
                recovered=True,
                value=value,
                level_before=before,
                spikes=len(found),
            )
        ]
    return [
        make(
            "history.loss_spike",
            "error",
            s.name,
            f"the training loss jumps to {value:.4g} at {fmt_step(run, step)} ({value / before:.2f}x its level "
            f"{before:.4g}) and does not come back: its median afterwards is {settled:.4g}{more}",
            CHECK,
            "the run lost what it had learned at that step: bisect the checkpoints around it, and look at the "
            "learning rate and gradient norm there (a schedule jump, a resume that reset the optimizer)",
            step=step,
            recovered=False,
            value=value,
            level_before=before,
            level_after=settled,
            spikes=len(found),
        )
    ]


def judge_grad_explosion(run: RunHistory) -> list[Finding]:
    s = run.first("grad_norm")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    vals = np.abs(vals)
    if len(vals) < 10:
        return []
    w = window(len(vals))
    run_len = 0
    bases = prefix_medians(vals)
    high = (bases > 0) & (vals > EXPLODE_RATIO * bases)
    for i in range(w, len(vals)):
        base = float(bases[i])
        if high[i]:
            run_len += 1
            if run_len >= EXPLODE_POINTS:
                start = i - run_len + 1
                step = int(steps[start])
                return [
                    make(
                        "history.grad_explosion",
                        "warning",
                        s.name,
                        f"the gradient norm explodes from {fmt_step(run, step)}: {run_len}+ consecutive logged "
                        f"norms above {EXPLODE_RATIO:g}x its earlier median {base:.3g} (reaching {vals[i]:.3g})",
                        CHECK,
                        "clip the gradient norm (e.g. max_grad_norm=1.0), lower the peak learning rate or "
                        "lengthen its warm-up, and check for fp16 overflow; bisect the checkpoints to the first "
                        "one whose update is out of line",
                        step=step,
                        ratio=float(vals[i] / base),
                        median_before=base,
                    )
                ]
        else:
            run_len = 0
    return []
