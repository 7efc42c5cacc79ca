"""Judge a run's stability live, step by step, against the run's own history only.

    judge = InstabilityJudge()
    for step in ...:
        findings += judge.step(step, loss=..., grad_norm=..., update_ratio=..., lr=..., scale=...)

No number here was fitted on a bed: every rule compares a step with what the same run did before.

- **Loss spike** (`loss.spike`, warning, at the step): the loss leaves the recent window — its median
  `m` and robust spread (1.4826 × MAD; of log loss when the losses are positive, since batch losses
  vary by factors) of the last `WINDOW` finite losses — by more than `RTOL` times `m` (Lightning's
  `SpikeDetection` default: 2, i.e. three times the running level) *and* by more than `Z` robust
  deviations (the noise of this run: a noisy fine-tuning loss is not a spike). The window is frozen
  while the episode lasts; the episode ends when the loss has been back under the bar `STAY` steps
  (an oscillating run is one episode, not a warning per swing), or after `WINDOW` steps at a new
  level, which then becomes the run's level (the window fills again).
- **Divergence** (`loss.spike`, error): the last `STAY` finite losses all `FAR` times the run's
  start or more (the median of its first `START` finite losses, before anything was flagged), or a
  non-finite loss during (or within `WINDOW` steps of) a spike, an explosion or an oversized update
  (SageMaker Debugger's `LossNotDecreasing`/`ExplodingTensor`, the Tuning Playbook's "loss goes up
  and stays").
- **Gradient explosion** (`grad.exploding`): the total gradient norm leaves the recent window by a
  factor of `RISE` (one order of magnitude) and by `Z` robust deviations of log10 norm (warning);
  `GRAD_FAR` (two orders of magnitude) times the start norm for `STAY` steps (error). Norms the
  trainer clipped are not passed in.
- **Oversized update** (`optim.lr_too_large`, warning): |Δθ| / |θ| of one update is 1 or more (the
  step moved the weights by more than their own size), or the update ratio per unit learning rate is
  `FAR` times the run's first measured one.
- **Loss-scale collapse** (`amp.scale_collapse`, warning): a GradScaler's scale falls `HALVINGS`
  halvings below where it settled after its first skips (a single skipped fp16 step is one halving).

Each rule speaks once per episode; each error once per run. Steps are the caller's (the trainer's
0-based global step).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from statistics import median

from ..findings import Finding
from .base import make

__all__ = ["InstabilityJudge", "judge_instability"]

CHECK = "checks.instability_live"
WINDOW = 32  # recent finite values the level and spread come from
WARM = 10  # values in the window before anything is judged against it (a MAD of fewer is mostly luck)
START = 5  # first finite values that define where the run started
RTOL = 2.0  # a spike is 1 + RTOL times the window's median or more (Lightning's SpikeDetection default)
Z = 6.0  # … and this many robust deviations above it
RISE = 10.0  # a gradient norm an order of magnitude above its window
FAR = 10.0  # divergence: an order of magnitude above the start, for STAY steps in a row
GRAD_FAR = 100.0  # a gradient norm two orders of magnitude above its start, for STAY steps
STAY = 5
HALVINGS = 8  # loss-scale halvings below its settled value
MAD_SIGMA = 1.4826  # MAD -> standard deviation for normal noise

LR_HINT = ("lower the learning rate (or add warm-up), and clip the gradient norm; if the loss came back, "
           "look at the batch of that step")


def _spread(values: Sequence[float], level: float) -> float:
    return MAD_SIGMA * median(abs(v - level) for v in values)


def _deviations(window: Sequence[float], level: float, x: float) -> tuple[float, float]:
    """(MAD, robust deviations of `x` above `level`). Positive losses vary by factors (a hard batch costs
    a multiple of an easy one), so they are compared in log space; others on the linear scale."""
    if level > 0 and x > 0 and min(window) > 0:
        logs = [math.log(v) for v in window]
        centre = median(logs)
        spread = _spread(logs, centre)
        return median(abs(v - level) for v in window), (math.log(x) - centre) / spread if spread > 0 else math.inf
    spread = _spread(window, level)
    return spread / MAD_SIGMA, (x - level) / spread if spread > 0 else math.inf


def _g(x: float) -> str:
    return f"{x:.4g}"


class _Window:
    """The recent finite values of one quantity, with the run's start."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.start: list[float] = []
        self.start_frozen = False
        self.episode: tuple[float, float] | None = None  # (level, spread) frozen when an episode opened
        self.far_run = 0  # consecutive values FAR above the start
        self.calm = 0  # consecutive values back under the bar during an episode
        self.lasted = 0  # steps the open episode has lasted

    def add(self, x: float) -> None:
        if self.episode is not None:  # a spike is neither the recent level nor the run's start
            return
        self.recent.append(x)
        if not self.start_frozen and len(self.start) < START:
            self.start.append(x)

    def start_level(self) -> float | None:
        return median(self.start) if self.start else None


class InstabilityJudge:
    """Feed it one step at a time; it returns the findings that step raised (usually none)."""

    def __init__(self) -> None:
        self.loss, self.grad = _Window(), _Window()
        self.ratio_base: float | None = None  # the first measured update ratio per unit learning rate
        self.ratio_episode = False
        self.scale_settled: float | None = None  # the scale after the scaler's first skips
        self.scale_last: float | None = None
        self.scale_said = False
        self.lr: float | None = None  # the last learning rate given
        self.flagged: int | None = None  # the first step any warning fired
        self.last_flag: int | None = None  # the last step any finding fired
        self.said: set[str] = set()  # errors said (once per run)

    # ---- the caller's side ----------------------------------------------------------------------

    def step(self, step: int, *, loss: float | None = None, grad_norm: float | None = None,
             update_ratio: float | None = None, lr: float | None = None, scale: float | None = None) -> list[Finding]:
        out: list[Finding] = []
        self.lr = lr if lr is not None else self.lr
        if loss is not None:
            out += self._loss(step, float(loss))
        if grad_norm is not None:
            out += self._grad(step, float(grad_norm))
        if update_ratio is not None:
            out += self._ratio(step, float(update_ratio), lr)
        if scale is not None:
            out += self._scale(step, float(scale))
        if out and self.flagged is None:
            self.flagged = step
        if out:
            self.last_flag = step
        if self.flagged is not None:  # a run that is already unstable no longer defines its start
            self.loss.start_frozen = self.grad.start_frozen = True
        return out

    # ---- the loss ---------------------------------------------------------------------------------

    def _loss(self, step: int, x: float) -> list[Finding]:
        w = self.loss
        if not math.isfinite(x):
            # a NaN is the run diverging only while it is unstable: long after a spike that recovered, a
            # non-finite loss is the non-finite locator's to explain (a bad batch, an op)
            unstable = w.episode is not None or self.grad.episode is not None or self.ratio_episode or (
                self.last_flag is not None and step - self.last_flag <= WINDOW)
            if unstable and "diverged" not in self.said:
                self.said.add("diverged")
                return [make("loss.spike", "error", "optimizer",
                             f"step {step}: the run diverged: the loss is {x} after the instability flagged at step "
                             f"{self.flagged} (the run started at loss {_g(w.start_level() or math.nan)})"
                             f"{self._at_lr()}", CHECK,
                             hint=LR_HINT, step=step, loss=x, flagged_at=self.flagged, start=w.start_level())]
            return []
        out = self._spike(step, x)
        out += self._diverging(step, x)
        w.add(x)
        return out

    def _spike(self, step: int, x: float) -> list[Finding]:
        w = self.loss
        if w.episode is not None:
            level, _ = w.episode
            calm = x - level < RTOL * abs(level) or _deviations(w.recent, level, x)[1] < Z  # `or`: cheap test first
            w.calm, w.lasted = (w.calm + 1 if calm else 0), w.lasted + 1
            if w.calm >= STAY:  # back under the bar for a while: the episode is over
                w.episode, w.calm, w.lasted = None, 0, 0
            elif w.lasted >= WINDOW:  # a new level that stays (and is no divergence): it is the run's level now
                w.episode, w.calm, w.lasted = None, 0, 0
                w.recent.clear()
            return []
        if len(w.recent) < WARM:
            return []
        level = median(w.recent)
        rise = x - level
        if rise <= 0 or rise < RTOL * abs(level):  # the cheap test first: most steps end here
            return []
        spread, deviations = _deviations(w.recent, level, x)
        if deviations < Z:
            return []
        w.episode = (level, spread)
        return [make("loss.spike", "warning", "loss",
                     f"step {step}: the loss jumps to {_g(x)}, {_g(x / level) if level > 0 else 'n/a'}× the median "
                     f"{_g(level)} of the last {len(w.recent)} steps ({_g(deviations)} robust deviations above it)",
                     CHECK, hint=LR_HINT, step=step, loss=x, window_median=level, window_mad=spread,
                     deviations=deviations, window=len(w.recent))]

    def _diverging(self, step: int, x: float) -> list[Finding]:
        w, start = self.loss, self.loss.start_level()
        if start is None or start <= 0 or not (w.start_frozen or len(w.start) >= START):
            return []
        w.far_run = w.far_run + 1 if x >= FAR * start else 0
        if w.far_run < STAY or "diverged" in self.said:
            return []
        self.said.add("diverged")
        began = "its first step's loss" if len(w.start) == 1 else f"the median of its first {len(w.start)} steps"
        return [make("loss.spike", "error", "optimizer",
                     f"step {step}: the run diverges: the loss has stayed at {_g(FAR)}× its start or above for "
                     f"{w.far_run} steps (now {_g(x)}; the run started at {_g(start)}, {began}){self._at_lr()}",
                     CHECK, hint=LR_HINT, step=step, loss=x, lr=self.lr, start=start, steps_above=w.far_run,
                     since=step - w.far_run + 1)]

    def _at_lr(self) -> str:
        return f", at learning rate {_g(self.lr)}" if self.lr else ""

    # ---- the gradient norm --------------------------------------------------------------------------

    def _grad(self, step: int, g: float) -> list[Finding]:
        w = self.grad
        if not math.isfinite(g) or g <= 0:  # an fp16 overflow the scaler skips; a step without gradients
            return []
        out: list[Finding] = []
        lg = math.log10(g)
        if w.episode is not None:
            level, spread = w.episode
            w.calm = w.calm + 1 if lg < level + max(math.log10(RISE), Z * spread) else 0
            if w.calm >= STAY:
                w.episode, w.calm = None, 0
        elif len(w.recent) >= WARM:
            level = median(w.recent)
            if lg - level >= math.log10(RISE) and lg - level >= Z * _spread(w.recent, level):
                spread = _spread(w.recent, level)
                w.episode = (level, spread)
                out.append(make("grad.exploding", "warning", "grad",
                                f"step {step}: the total gradient norm jumps to {_g(g)}, {_g(10 ** (lg - level))}× "
                                f"the median {_g(10 ** level)} of the last {len(w.recent)} steps", CHECK,
                                hint=LR_HINT, step=step, grad_norm=g, window_median=10 ** level,
                                window_spread_log10=spread, window=len(w.recent)))
        start = w.start_level()
        if start is not None and (w.start_frozen or len(w.start) >= START):
            w.far_run = w.far_run + 1 if lg >= start + math.log10(GRAD_FAR) else 0
            if w.far_run >= STAY and "grad" not in self.said:
                self.said.add("grad")
                out.append(make("grad.exploding", "error", "optimizer",
                                f"step {step}: the gradient norm has stayed at {_g(GRAD_FAR)}× its start or above for "
                                f"{w.far_run} steps (now {_g(g)}; it started at {_g(10 ** start)})"
                                f"{self._at_lr()}", CHECK,
                                hint=LR_HINT, step=step, grad_norm=g, start=10 ** start, steps_above=w.far_run))
        w.add(lg)
        return out

    # ---- the update ratio ---------------------------------------------------------------------------

    def _ratio(self, step: int, r: float, lr: float | None) -> list[Finding]:
        if not math.isfinite(r) or r <= 0:
            return []
        per_lr = r / lr if lr and lr > 0 else None
        if self.ratio_base is None and per_lr is not None:
            self.ratio_base = per_lr
            grown = False
        else:
            grown = per_lr is not None and self.ratio_base is not None and per_lr >= FAR * self.ratio_base
        big = r >= 1.0
        if not (big or grown):
            self.ratio_episode = False
            return []
        if self.ratio_episode:
            return []
        self.ratio_episode = True
        why = (f"the update is {_g(r)}× the size of the weights it changed (|Δθ| / |θ|)" if big else
               f"the update ratio |Δθ| / |θ| is {_g(r)}, {_g(per_lr / self.ratio_base)}× the first measured one "
               "per unit learning rate")
        at = f" at learning rate {_g(lr)}" if lr else ""
        return [make("optim.lr_too_large", "warning", "optimizer", f"step {step}: {why}{at}", CHECK,
                     hint="lower the learning rate or add warm-up; a healthy update moves the weights by a small "
                          "fraction of their size", step=step, update_ratio=r, lr=lr, baseline_per_lr=self.ratio_base)]

    # ---- the loss scale -------------------------------------------------------------------------------

    def _scale(self, step: int, s: float) -> list[Finding]:
        last, self.scale_last = self.scale_last, s
        if not math.isfinite(s) or s <= 0:
            return []
        if self.scale_settled is None:
            if last is not None and s >= last:  # the first step that did not halve: settled
                self.scale_settled = last
            return []
        if self.scale_said or s > self.scale_settled / 2 ** HALVINGS:
            return []
        self.scale_said = True
        halvings = math.log2(self.scale_settled / s)
        return [make("amp.scale_collapse", "warning", "optimizer",
                     f"step {step}: the loss scale fell to {_g(s)}, {halvings:.0f} halvings below the "
                     f"{_g(self.scale_settled)} it settled at: the scaler keeps skipping steps because the "
                     "gradients keep overflowing", CHECK,
                     hint="the gradients are growing: lower the learning rate, clip gradients, or find the op that "
                          "overflows (`signalchain doctor --family precision`)",
                     step=step, scale=s, settled=self.scale_settled, halvings=halvings)]


def judge_instability(losses: Sequence[float], grad_norms: Sequence[float] | None = None, *,
                      steps: Sequence[int] | None = None) -> list[Finding]:
    """Run the live judge over a whole recorded history (one value per step)."""
    judge, out = InstabilityJudge(), []
    norms = list(grad_norms) if grad_norms is not None else []
    for i, loss in enumerate(losses):
        out += judge.step(steps[i] if steps is not None else i, loss=loss,
                          grad_norm=norms[i] if i < len(norms) else None)
    return out
