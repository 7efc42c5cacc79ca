"""`LiveSession`: signalchain inside a trainer's loop, the one object both trainer callbacks drive.

    session = LiveSession(out_dir="signalchain-live")
    session.attach(model, optimizer, replay=lambda m, b: m(**b).loss)
    for step, batch in enumerate(loader):
        session.begin_step(step, batch)          # loader wait = now - the previous end_step
        loss = model(**batch).loss; loss.backward()
        if session.before_optimizer(step, loss): # the Monitor's verdict; False: the update is withheld
            ...
        optimizer.step()                         # a no-op update after a False verdict (skip_nonfinite)
        optimizer.zero_grad(); session.end_step(step)
    session.close()                              # findings.json written, TensorBoard flushed

It runs the `Monitor` (non-finite trigger with replay, scaler skips, update ratio) and judges the
run's stability against its own history (`checks.instability_live`), saves the first
step as a golden batch, writes findings to the "signalchain" logger and `out_dir/findings.json`
(atomically, whenever they change), and scalars and audio to TensorBoard. No trainer is imported
here. Every entry point catches its own exceptions as `internal.check_failed` findings (unless
`strict`): a bug in signalchain must not end a run of many hours. Steps are the trainer's 0-based
optimizer-step index, in findings' evidence and on TensorBoard's axis alike.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..findings import Finding
from ..monitor import Monitor
from ..probes.forward_tap import ForwardTap
from ._first_step import save_first_step
from ._first_step_judges import FirstStepJudging
from ._guard import StepGuard
from ._instability import LiveStability
from ._reporting import Reporting
from ._scalars import StepScalars
from ._tensorboard import TensorBoardSink
from ._watching import Watching

__all__ = ["LiveSession"]


class LiveSession(Reporting, StepScalars, Watching, FirstStepJudging, LiveStability):
    """Monitor, golden batch, findings file and TensorBoard for one training run.

    out_dir: where findings.json, golden/ and tensorboard/ go (None: nowhere; findings stay in
    `findings` and the log). every: steps between TensorBoard flushes and per-codebook CE.
    ratio_every: the Monitor's update-ratio period. tensorboard: True (a writer on
    out_dir/tensorboard), False, a folder, or a SummaryWriter. sample_every / sample_fn: every N steps
    `sample_fn(model) -> (audio, sample_rate)` goes to TensorBoard as audio. golden: save the first
    step. skip_nonfinite: withhold the update of a step judged non-finite. strict: raise instead of
    recording signalchain's own failures (and on a non-finite step). watchdog_timeout / distributed:
    the stall watchdog and the rank watch (used when their modules are installed).
    """

    def __init__(self, *, out_dir: str | Path | None = "signalchain-live", every: int = 50, ratio_every: int = 20,
                 tensorboard: bool | str | Any = True, sample_every: int = 0,
                 sample_fn: Callable[[torch.nn.Module], tuple[Any, int]] | None = None,
                 golden: bool = True, skip_nonfinite: bool = True, strict: bool = False,
                 watchdog_timeout: float | None = None, first_timeout: float | None = None,
                 distributed: bool | None = None, logger: logging.Logger | None = None):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.every, self.ratio_every = max(1, int(every)), int(ratio_every)
        self.sample_every, self.sample_fn = int(sample_every), sample_fn
        self.golden, self.skip_nonfinite, self.strict = golden, skip_nonfinite, strict
        self.watchdog_timeout, self.distributed = watchdog_timeout, distributed
        self.first_timeout = first_timeout if first_timeout is not None else (
            3 * watchdog_timeout if watchdog_timeout else None)
        self.log = logger or logging.getLogger("signalchain")
        self.findings: list[Finding] = []
        self.source = "live"  # the callbacks say which trainer, for the golden's provenance
        self.clip_norm: float | None = None  # the trainer clips to this before `before_optimizer` (HF)
        self.unclipped_at: int | None = None  # the last step whose unclipped norm was written
        self.skipped_steps = 0  # updates withheld by the guard
        self.phase_times: dict[str, float] = {}
        self.tb = TensorBoardSink(tensorboard, self.out_dir / "tensorboard" if self.out_dir else None, self._add)
        self.monitor: Monitor | None = None
        self.model: torch.nn.Module | None = None
        self.rank, self.world = 0, 1
        self._guard: StepGuard | None = None
        self._tap: ForwardTap | None = None
        self._replay_fn: Callable[[torch.nn.Module, Any], Any] | None = None
        self._lock = threading.RLock()  # the watchdog reports from its own thread
        self._closed = False
        self._said: set[tuple[str, str]] = set()
        self._step: int | None = None  # the step between begin_step and end_step
        self._context: Any = None  # the Monitor's step context of that step
        self._last_end: float | None = None
        self._last_step: int | None = None
        self._losses: list[tuple[torch.Tensor, Any]] = []  # this step's micro-batch losses, with their batch
        self._batch: Any = None
        self._output: Any = None
        self._labels: Any = None
        self._replay_batch: Any = None
        self._judged_loss: Any = None
        self._replaying = False
        self._golden_done = not golden
        self._phase = "idle"
        self._watchdog: Any = None
        self._rank_watch: Any = None

    # ---- the trainer's side ------------------------------------------------------------------------

    def attach(self, model: torch.nn.Module, optimizer: Any, *, scaler: Any = None,
               replay: Callable[[torch.nn.Module, Any], Any] | None = None, rank: int = 0, world: int = 1) -> None:
        """Watch `model` trained by `optimizer` (the object the trainer calls `.step()` on)."""
        self._safely("attach", self._attach, model, optimizer, scaler, replay, rank, world)

    def watch_forward(self, model: torch.nn.Module) -> None:
        """Take each training forward's batch (its kwargs) and loss from hooks on `model` (for trainers
        whose callbacks never see the loss: HF)."""
        self._safely("watch_forward", self._watch_forward, model)

    def begin_step(self, step: int, batch: Any = None) -> None:
        self._safely("begin_step", self._begin, step, batch)

    def observe(self, loss: Any = None, *, batch: Any = None, output: Any = None, labels: Any = None) -> None:
        """One micro-batch of the open step: its loss (any number per optimizer step), batch, output."""
        self._safely("observe", self._observe, loss, batch, output, labels)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Name what the run is doing ("forward", "backward", "optimizer", "checkpoint", …), timed."""
        before, start = self._phase, time.perf_counter()
        self._safely("phase", self._mark, name)
        try:
            yield
        finally:
            self._safely("phase", self._phase_done, name, time.perf_counter() - start, before)

    def before_optimizer(self, step: int, loss: Any = None, grad_norm: Any = None) -> bool:
        """Judge the step (after backward, before the update). False: non-finite, the update is skipped."""
        if self._closed:
            return True
        try:
            return self._before(step, loss, grad_norm)
        except Exception as exc:
            if self.strict:
                raise
            self._internal("before_optimizer", exc)
            return True

    def end_step(self, step: int, logs: Mapping[str, float] | None = None) -> None:
        self._safely("end_step", self._end, step, logs)

    def close(self) -> list[Finding]:
        """Flush and release everything; idempotent. Returns the findings."""
        with self._lock:
            if self._closed:
                return self.findings
            self._closed = True
        for what, fn in (("monitor", self._close_monitor), ("tensorboard", self.tb.close),
                         ("watchdog", self._stop_watchers)):
            self._safely(f"close.{what}", fn)
        self._write()
        return self.findings

    @property
    def in_step(self) -> bool:
        """Between begin_step and end_step (gradient accumulation: several batches in one step)."""
        return self._step is not None

    def progress(self) -> None:
        """Progress that is not a training step (an evaluation batch): the watchdog is re-armed."""
        self._safely("progress", self._progress, self._last_step)

    def mark(self, name: str) -> None:
        """The run is in phase `name` from now on (for hooks that see a phase begin but not end)."""
        self._safely("mark", self._mark, name)

    def scalar(self, tag: str, value: float, step: int) -> None:
        """One more scalar under `signalchain/` (written at the next flush)."""
        if self.rank == 0:
            self._safely("scalar", self.tb.scalar, tag, value, step)

    # ---- internals ------------------------------------------------------------------------------------

    def _attach(self, model: torch.nn.Module, optimizer: Any, scaler: Any, replay: Any, rank: int,
                world: int) -> None:
        if self._guard is not None or self.monitor is not None:  # attached again (a second fit): start over
            self._close_monitor()
        self.model, self.rank, self.world, self._replay_fn = model, rank, world, replay
        inner = getattr(optimizer, "optimizer", optimizer)  # HF's AcceleratedOptimizer wraps a torch one
        counted = inner if isinstance(inner, torch.optim.Optimizer) else optimizer
        self.monitor = Monitor(model, counted, scaler=scaler, replay=self._replay if replay else None,
                               strict=self.strict, on_finding=self._from_monitor, ratio_every=self.ratio_every,
                               rng="torch")  # a forward draws from torch (dropout); Python's and NumPy's
                                             # generators serve the loader, which a replay does not re-run
        if self.skip_nonfinite and optimizer is not None:
            self._guard = StepGuard(optimizer)
        self._first_attach(model, optimizer)  # the first step judged as doctor judges a golden
        self._start_rank_watch(model)  # first: the watchdog takes its stall hook
        self._start_watchdog()

    def _watch_forward(self, model: torch.nn.Module) -> None:
        if self._tap is not None:
            self._tap.close()
        self._tap = ForwardTap(model, lambda b, o, loss: self._safely("forward", self._from_forward, b, o, loss))

    def _from_forward(self, batch: Any, output: Any, loss: Any) -> None:
        if self._step is not None and not self._replaying:
            self._observe(loss, batch, output, None)

    def _begin(self, step: int, batch: Any) -> None:
        now = time.perf_counter()
        if self._context is not None:  # the previous step never ended (an exception in the trainer)
            self._exit_context()
        self._step, self._losses, self._batch, self._output, self._labels = step, [], batch, None, None
        if self._last_end is not None:
            wait = now - self._last_end
            self.scalar("loader_wait_s", wait, step)
        self._mark("forward")
        if self.monitor is not None:
            self._context = self.monitor.step(batch)
            self._context.__enter__()

    def _observe(self, loss: Any, batch: Any, output: Any, labels: Any) -> None:
        if self._step is None or self._replaying:
            return
        if loss is not None and isinstance(loss, torch.Tensor):
            self._losses.append((loss.detach(), batch if batch is not None else self._batch))
        if self._batch is None and batch is not None:
            self._batch = batch
        # the output (its logits) is kept only on steps that use it: holding logits through backward costs memory
        if output is not None and (not self._golden_done or self._step % self.every == 0):
            self._output = output
            if labels is None and isinstance(batch, Mapping):
                labels = batch.get("labels")
            self._labels = labels
        self._mark("backward")  # what follows a training forward

    def _step_loss(self, loss: Any) -> Any:
        """The loss to judge: the one given, else this step's micro-batch losses (any non-finite one
        is the verdict, and its batch is the one replayed)."""
        batches = [b for _, b in self._losses]
        self._replay_batch = batches[0] if batches else self._batch
        if loss is not None:
            return loss
        if len(self._losses) <= 1:
            return self._losses[0][0] if self._losses else None
        means = torch.stack([t.float().mean() for t, _ in self._losses])  # [micro-batches]; NaN/inf propagate
        finite = torch.isfinite(means)
        if bool(finite.all()):  # one device read, only with gradient accumulation
            return means.mean()
        first = int((~finite).nonzero()[0, 0])
        self._replay_batch = batches[first]
        return self._losses[first][0]

    def _before(self, step: int, loss: Any, grad_norm: Any) -> bool:
        self._mark("optimizer")
        if self.monitor is None:
            return True
        judged = self._step_loss(loss)
        if self._replay_batch is not None:  # the replay (and the locator's scan of the inputs) sees this batch
            self.monitor.use_batch(self._replay_batch)
        self._safely("stability", self._stability_before)
        ok = self.monitor.check(judged, grad_norm)
        history = self.monitor.history
        norm = history["grad_norm"][-1] if history["grad_norm"] else math.nan
        if not ok and self.skip_nonfinite and self._guard is not None:  # under DDP the Monitor says False only
            self._guard.skip_next = True                                # for a verdict every rank shares
            self.skipped_steps += 1
        if history["loss"]:
            self.scalar("loss", history["loss"][-1], step)
        # after the trainer clipped, the norm seen here is the unclipped one only if clipping did nothing
        if self.clip_norm is None or self.clip_norm <= 0 or norm < self.clip_norm * (1 - 1e-3):
            self.scalar("grad_norm_unclipped", norm, step)
            self.unclipped_at = step
        self._judged_loss = judged
        return ok

    def _save_golden(self, step: int, loss: Any) -> None:
        if self.out_dir is None or self.rank != 0:
            return
        batch = self._replay_batch if self._replay_batch is not None else self._batch
        save_first_step(self.out_dir / "golden", batch, self._output, loss, source=self.source, step=step,
                        extra=self._first_extra())

    def _end(self, step: int, logs: Mapping[str, float] | None) -> None:
        try:
            self._exit_context()
            if not self._golden_done:  # at the end of the step: the trainer's outputs (logits) are in by now
                self._golden_done = True
                self._safely("golden", self._save_golden, step, self._judged_loss)
            self._safely("first_step", self._first_step_end, step)
            self._safely("scalars", self._step_scalars, step, logs)
            self._safely("stability", self._stability_end, step)  # loss spikes, explosions, oversized updates
            if step % self.every == 0:
                self._safely("tensorboard", self.tb.flush)
            self._rank_watch_step(step)
            if self._watchdog is not None:
                self._watchdog.beat(step)
        finally:  # whatever failed above, the step is over: the next begin_step starts a new one
            self._step, self._losses, self._batch, self._output, self._labels = None, [], None, None, None
            self._replay_batch = self._judged_loss = None
            self._mark("loader")  # until the next begin_step the run waits for its data
            self._last_end = time.perf_counter()
            self._last_step = step

    def _replay(self, model: torch.nn.Module, batch: Any) -> Any:
        """The Monitor's replay, on the micro-batch that went non-finite; the forward hooks stand aside."""
        assert self._replay_fn is not None
        self._replaying = True
        try:
            return self._replay_fn(model, self._replay_batch if self._replay_batch is not None else batch)
        finally:
            self._replaying = False

    def _exit_context(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(None, None, None)

    def _close_monitor(self) -> None:
        try:
            self._exit_context()
        finally:
            for part in (self._guard, self._tap, self.monitor):
                if part is not None:
                    part.close()
            self._first_close()
            self._guard = self._tap = None
