"""`Monitor`: an always-on finiteness check for a training loop, and the locator when it fires.

    monitor = signalchain.Monitor(model, optimizer, replay=lambda m, b: loss_fn(m(b.x), b.y))
    for batch in loader:
        with monitor.step(batch):
            loss = loss_fn(model(batch.x), batch.y)
            loss.backward()
            if monitor.check(loss):  # before optimizer.step: False = non-finite, skip the update
                optimizer.step()
            optimizer.zero_grad()
    print(monitor.findings)

Per step it keeps a reference to the batch and the RNG states, and `check` tests the loss and the
total gradient norm (one fused norm over the gradients): well under 3 % of a step. Every
`ratio_every` steps it also measures the update ratio |Δθ| / |θ| of that step (a copy of at most
`ratio_elements` parameter values before the update), and says `optim.step_skipped` when an update
that should have happened changed nothing. `history` keeps loss, gradient norm, scale and update
ratio per step for plotting. Only when the
check fails does it replay the step — the weights are still the ones the step used, because the
check runs before `optimizer.step` — under the op-level locator, and turn what it finds into
findings. With `snapshot=True` it also keeps the model and optimizer state from before the update
(a copy per step), so that an update that writes NaN into the weights can be replayed as well.

It never breaks the loop it watches: anything that goes wrong inside it becomes a finding, unless
`strict=True`, in which case a non-finite step raises `NonFiniteError` after it has been located.
And it fails closed: a loss is judged on all of its elements (an unreduced `reduction="none"` loss
with one NaN element is a non-finite step); when the Monitor cannot judge a step (a loss it cannot
read, an exception inside its own measurement, a replay that fails) `check` still returns False
whenever any value it can see (loss elements, gradients, parameters) is non-finite, and the finding
says why it could not judge (the replay's own error text included). `unjudged` lists those steps.
A scaler is left the overflow only when it refuses a non-finite gradient itself (torch's enabled
`GradScaler`); a duck-typed or disabled one is not trusted with a NaN.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..checks.numerics import judge_locate
from ..errors import SignalchainError
from ..experiments.numerics.state import Snapshot, scan_state
from ..experiments.optimisation._train import norm_of
from ..findings import Finding, Severity, check_failed
from ..probes.step_calls import StepCalls
from ..records.numerics import LocateMeasurement
from ._findings import replica_rank, unjudged, unlocated, unwritten, update_kept
from ._reading import LossReading, nonfinite_names, read_loss, safely, scaler_guards, visible
from ._replay import replay_step, stateful
from ._update import UpdateJudges

__all__ = ["Monitor", "NonFiniteError"]

log = logging.getLogger("signalchain")
CHECK = "monitor"
RATIO_EVERY = 20  # steps between update-ratio measurements (a parameter copy each)
PARAMS_EVERY = 100  # steps between re-listing the model's parameters (a model may gain some: rare)
RATIO_ELEMENTS = 1 << 22  # at most this many parameter values copied per measurement


def stepping_optimizer(optimizer: Any) -> torch.optim.Optimizer | None:
    """The torch optimizer whose `step()` updates the weights: wrappers hold it as `.optimizer`
    (Accelerate's `AcceleratedOptimizer` subclasses `torch.optim.Optimizer` without its `__init__`, so
    hooks cannot be registered on the wrapper itself; Lightning's `LightningOptimizer`). None when there
    is nothing with a step hook to register."""
    seen: set[int] = set()
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer) and id(optimizer) not in seen:
        seen.add(id(optimizer))
        optimizer = optimizer.optimizer
    return optimizer if hasattr(optimizer, "register_step_post_hook") else None


class NonFiniteError(SignalchainError):
    """A monitored step went non-finite and the monitor is strict."""


class Monitor(UpdateJudges):
    """Watch a training loop for non-finite losses, gradients and weights; locate the first bad op.

    model, optimizer: what the loop trains. scaler: its GradScaler, if any (skipped steps are counted,
    not treated as NaN). replay: `fn(model, batch) -> loss` recomputing the step's loss (no backward),
    needed to locate; `pipeline`: a signalchain Pipeline, used for the replay when `replay` is None.
    snapshot: keep the pre-update state every step, to replay an update that poisons the weights.
    scan_every: scan the weights for non-finite values every N steps (0: never). locate: replay on
    failure. strict: raise `NonFiniteError` on a non-finite step. on_finding: called with each finding
    (default: a warning on the "signalchain" logger). ratio_every: measure the update ratio every N
    steps, the first included (0: never); ratio_elements: how many parameter values it may copy.
    rng: the generators kept per step for the replay: "all" (Python, NumPy, torch: ~0.2 ms) or
    "torch" (~5 µs; for loops whose forward draws only from torch, as dropout and CFG dropout do).
    """

    def __init__(self, model: torch.nn.Module, optimizer: Any = None, *, scaler: Any = None,
                 replay: Callable[[torch.nn.Module, Any], Any] | None = None, pipeline: Any = None,
                 snapshot: bool = False, scan_every: int = 0, locate: bool = True, strict: bool = False,
                 on_finding: Callable[[Finding], None] | None = None, ratio_every: int = RATIO_EVERY,
                 ratio_elements: int = RATIO_ELEMENTS, rng: str = "all"):
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.replay, self.pipeline = replay, pipeline
        self.snapshot, self.scan_every, self.locate_on_failure, self.strict = snapshot, scan_every, locate, strict
        self.on_finding = on_finding or (lambda f: log.warning("%s @ %s: %s", f.id, f.stage, f.message))
        self.findings: list[Finding] = []
        self.steps = 0
        self.fired: list[int] = []  # steps whose check failed
        self.kept: list[int] = []  # of those, steps whose update went ahead: one rank's loss only, under DDP
        self.unjudged: list[int] = []  # steps the monitor could not fully judge (the findings say why)
        self.skipped = 0  # steps the scaler skipped
        self.reports: list[LocateMeasurement] = []
        self.ratio_every, self.ratio_elements = ratio_every, ratio_elements
        self._params: list[torch.Tensor] | None = None  # the model's parameters, listed once per PARAMS_EVERY steps
        self.rng = rng  # which generators each step keeps for the replay: "all", or "torch" (cheaper)
        #: per step: loss and gradient norm (from `check`), loss scale (with a scaler); update ratio
        #: on measured steps only (`ratio_steps` says which)
        self.history: dict[str, list[float]] = {"loss": [], "grad_norm": [], "scale": [], "update_ratio": [],
                                                 "ratio_steps": []}
        self.losses = self.history["loss"]
        self._before: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # (parameter, its value before)
        self._updated = True  # this step's update was meant to happen (check passed, scaler did not skip)
        self._stepped = 0  # optimizer.step() calls seen during this step
        self._hook: StepCalls | None = None
        self._stepping: Any = None  # the torch optimizer the hook counts (inside any wrapper)
        self._rates: list[tuple[float, float | None]] | None = None  # (lr, a scheduler's initial_lr) per group
        self._scheduled_zero = False  # a measured update at a scheduled rate of 0 was seen (a warm-up's start)
        self._measure_next = False  # measure the next step's update too (the measured one was empty by design)
        self._batch: Any = None
        self._rng: Snapshot | None = None
        self._state: Snapshot | None = None  # before this step's update (snapshot=True)
        self._checked = False
        self._scale: float | None = None
        self._located: set[str] = set()  # failure kinds ("loss", "gradient norm") already replayed
        self._said: set[tuple[str, str]] = set()  # internal failures already reported (once each)
        self._history_at = 0  # len(history["loss"]) when this check began
        if stepping_optimizer(optimizer) is not None:  # last: a failure here is reported through the fields above
            self._guard(self._hook_optimizer)

    # ---- the loop's side ------------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, batch: Any = None) -> Iterator[Monitor]:
        """Wrap one training step (forward, backward, `check`, update)."""
        self._guard(self._begin, batch)
        try:
            yield self
        finally:
            self._guard(self._end)

    def check(self, loss: Any, grad_norm: Any = None) -> bool:
        """Call after backward and before `optimizer.step`. True when the loss (every element of it)
        and the gradients are finite; False means: skip this update. Never raises unless strict.

        Under data parallelism (torch.distributed initialised, world > 1) a loss that is non-finite on
        this rank only, while the all-reduced gradient every rank applies is finite, is located and
        reported but returns True (`optim.update_kept`, `kept`): withholding the update on one rank
        alone would make the replicas differ."""
        self._history_at = len(self.history["loss"])
        try:
            return self._check(loss, grad_norm)
        except NonFiniteError:
            raise
        except Exception as exc:  # never break the loop we watch, and never let a NaN through
            return self._fail_closed(loss, exc)

    def close(self) -> None:
        """Stop counting the optimizer's steps (removes its hook)."""
        if self._hook is not None:
            self._hook.close()
            self._hook = None

    # ---- internals ------------------------------------------------------------------------------

    def _hook_optimizer(self) -> None:
        self._stepping = stepping_optimizer(self.optimizer)
        self._hook = StepCalls(self._stepping, on_step=self._count_step)

    def _count_step(self) -> None:
        self._stepped += 1
        if self._before is not None:  # a measured step: the rates this update used (a scheduler moves them next)
            self._guard(self._read_rates)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            if self.strict:
                raise
            self._internal(exc)

    def _internal(self, exc: BaseException, **evidence: Any) -> None:
        """An exception inside the monitor: a finding, said once per distinct failure."""
        key = (type(exc).__name__, str(exc)[:200])
        if key in self._said:
            return
        self._said.add(key)
        f = check_failed(CHECK, exc)
        self._add(dataclasses.replace(f, evidence={**f.evidence, "step": self.steps, **evidence}))

    def _add(self, finding: Finding) -> None:
        self.findings.append(finding)
        try:
            self.on_finding(finding)
        except Exception:
            pass

    def use_batch(self, batch: Any) -> None:
        """The batch this step trained on, when the loop hands it over only after the forward (a trainer
        callback reads it from a forward hook): the replay runs on it."""
        self._batch = batch

    def _begin(self, batch: Any) -> None:
        self._batch, self._checked, self._updated, self._before, self._stepped = batch, False, True, None, 0
        self._rates = None
        self._rng = self._state = None  # never a previous step's: a replay from them would be wrong
        self._guard(self._take_start)
        if self.scaler is not None and self._scale is None:  # later steps carry the last step's scale over
            self._guard(self._read_scale)
        if self.ratio_every and (self.steps % self.ratio_every == 0 or self._measure_next):
            self._measure_next = False
            self._guard(self._copy_params)

    def _take_start(self) -> None:
        # RNG only (a few microseconds), and only when a replay can use it; the weights need no copy:
        # `check` runs before they change.
        can_replay = self.locate_on_failure and (self.replay is not None or self.pipeline is not None)
        if can_replay or self.snapshot:
            opt = self.optimizer if (self.snapshot and stateful(self.optimizer)) else None
            self._rng = Snapshot.take(self.model, opt, None, weights=self.snapshot, rng=self.rng)
            self._state = self._rng if self.snapshot else None

    def _end(self) -> None:
        self.steps += 1
        if self.scaler is not None and self._scale is not None:
            self._guard(self._judge_scale)
        if self._before:
            self._guard(self._judge_update, self._before)
        self._before = None
        if self.scan_every and self.steps % self.scan_every == 0:
            self._guard(self._scan)

    # ---- the verdict ------------------------------------------------------------------------------

    def _grad_norm(self, grad_norm: Any) -> float:
        if grad_norm is not None:
            given = read_loss(grad_norm)  # a number or a 0-d tensor (clip_grad_norm_'s result)
            if given.finite is not None and given.elements == 1:
                return given.value
        if self._params is None or self.steps % PARAMS_EVERY == 0:  # walking the modules costs more than a
            self._params = list(self.model.parameters())            # small model's norm: re-listed now and then
        return norm_of([q.grad for q in self._params if q.grad is not None])

    def _check(self, loss: Any, grad_norm: Any) -> bool:
        self._checked = True
        reading = read_loss(loss)
        norm = self._grad_norm(grad_norm)
        self.history["loss"].append(reading.value)  # `losses` is the same list
        self.history["grad_norm"].append(norm)
        weights: list[str] = []
        if reading.finite is None:  # a loss it cannot read: judge the step on the weights too
            weights, _ = nonfinite_names(self.model.named_parameters())
            self._cannot_judge(reading.reason or "the loss could not be read", norm, weights)
        # with a scaler that refuses non-finite gradients itself, an overflow is the scaler's to skip
        grads_ok = math.isfinite(norm) or scaler_guards(self.scaler)
        if reading.finite is not False and grads_ok and not weights:
            return True
        ok = self._fire(reading, norm, weights)
        if not ok and reading.finite is False and math.isfinite(norm) and not weights:
            rank = replica_rank()  # under data parallelism only a verdict every rank shares withholds the update
            if rank is not None:
                self.kept.append(self.steps)
                self._updated = True
                if "update_kept" not in self._located:
                    self._located.add("update_kept")
                    self._add(update_kept(self.steps, norm, rank))
                return True
        return ok

    def _cannot_judge(self, reason: str, norm: float, weights: list[str]) -> None:
        self.unjudged.append(self.steps)
        if ("unjudged", reason) in self._said:
            return
        self._said.add(("unjudged", reason))
        self._add(unjudged(self.steps, reason, norm, weights))

    def _fire(self, reading: LossReading, norm: float, weights: list[str]) -> bool:
        self.fired.append(self.steps)
        self._updated = False  # the loop is told to skip this update
        what = "loss" if reading.finite is False else ("gradient norm" if not math.isfinite(norm) else "weights")
        if what in self._located:  # already located and said: a run that stays broken is not replayed again
            if self.strict:
                raise NonFiniteError(f"step {self.steps}: the {what} is not finite again")
            return False
        self._located.add(what)
        report, replay_error = None, None
        if self.locate_on_failure and what != "weights":
            try:
                report = self._locate()
            except Exception as exc:  # the replay failed: the verdict stands, the finding says why
                replay_error = f"{type(exc).__name__}: {exc}"[:400]
        if report is not None and report.error:
            replay_error = report.error
        try:
            found = judge_locate(report) if report is not None else []
        except Exception as exc:
            found, replay_error = [], replay_error or f"judging the replay failed: {type(exc).__name__}: {exc}"
        if not found:
            found = [unlocated(self.steps, what, reading, norm, weights, replay_error,
                               replayed=report is not None and not replay_error)]
        said = {(f.id, f.stage) for f in self.findings}
        extra = {"step": self.steps, **({"replay_error": replay_error} if replay_error else {})}
        for f in found:  # a run that stays broken says so once; `fired` counts the steps
            if (f.id, f.stage) not in said:
                self._add(dataclasses.replace(f, evidence={**f.evidence, **extra}))
        if self.strict:
            raise NonFiniteError(f"step {self.steps}: {found[0].id} @ {found[0].stage}: {found[0].message}")
        return False

    def _fail_closed(self, loss: Any, exc: Exception) -> bool:
        """The monitor's own measurement raised: judge the step on whatever can still be seen."""
        loss_ok, grads, weights = visible(loss, self.model)
        grads_bad = bool(grads) and not (self.scaler is not None and safely(scaler_guards, self.scaler))
        seen_nothing = loss_ok is None and grads is None and weights is None
        bad = seen_nothing or loss_ok is False or grads_bad or bool(weights)  # nothing seen at all: closed
        seen = (f"loss {'unreadable' if loss_ok is None else ('finite' if loss_ok else 'NOT finite')}, "
                f"{'?' if grads is None else len(grads)} non-finite gradients, "
                f"{'?' if weights is None else len(weights)} non-finite parameters")
        if self.strict:
            if bad:
                raise NonFiniteError(f"step {self.steps}: the monitor failed ({type(exc).__name__}: {exc}) "
                                     f"and the step is not finite: {seen}") from exc
            raise exc
        del self.history["loss"][self._history_at:], self.history["grad_norm"][self._history_at:]
        self.history["loss"].append(float("nan") if loss_ok is not True else safely(float, loss, float("nan")))
        self.history["grad_norm"].append(float("nan"))
        self.unjudged.append(self.steps)
        self._internal(exc, verdict="skip the update" if bad else "finite", seen=seen)
        if bad:
            if not self.fired or self.fired[-1] != self.steps:
                self.fired.append(self.steps)
            self._updated = False
        return not bad

    # ---- replays ----------------------------------------------------------------------------------

    def _replay_fn(self) -> Callable[[torch.nn.Module, Any], Any] | None:
        if self.replay is not None:
            return self.replay
        if self.pipeline is not None:
            return lambda model, batch: self.pipeline.step(model, batch, lambda s, v, **m: v)
        return None

    def _locate(self, with_update: bool = False, state: Snapshot | None = None) -> LocateMeasurement | None:
        """Replay the step from its start under the locator, then put everything back as it was."""
        fn = self._replay_fn()
        if fn is None or self._rng is None:
            return None
        report = replay_step(self.model, self._batch, fn, self._rng, optimizer=self.optimizer, scaler=self.scaler,
                             pipeline=self.pipeline if self.replay is None else None,
                             with_update=with_update, state=state)
        self.reports.append(report)
        return report

    def _scan(self) -> None:
        try:
            try:
                scan = scan_state(self.model, self.optimizer, self.steps)
            except Exception:  # an optimizer without the usual `state`: the weights are still watched
                scan = scan_state(self.model, None, self.steps)
            bad = [i.name for i in scan.issues if i.problem == "nonfinite" and i.where != "optimizer"]
        except Exception:
            bad = visible(None, self.model)[2] or []
        if not bad or any(f.id == "nonfinite.state" for f in self.findings):
            return
        report, replay_error = None, None
        if self.snapshot and self._state and stateful(self.optimizer):
            try:
                report = self._locate(with_update=True, state=self._state)
            except Exception as exc:
                replay_error = f"{type(exc).__name__}: {exc}"[:400]
        found = [f for f in judge_locate(report) if f.stage == "optimizer"] if report is not None else []
        if not found:
            found = [unwritten(self.steps, bad, replay_error)]
        for f in found:
            self._add(f)

    def summary(self) -> dict[str, Any]:
        """steps seen; fired: the steps `check` answered False (the loop was told to withhold their
        update); skipped: updates that did not happen, those withheld plus the scaler's own skips."""
        return {"steps": self.steps, "fired": self.fired, "skipped": len(self.fired) - len(self.kept) + self.skipped,
                "scaler_skipped": self.skipped, "errors": sum(1 for f in self.findings if f.severity == Severity.ERROR)}

