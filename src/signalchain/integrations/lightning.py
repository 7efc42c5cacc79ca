"""`SignalchainCallback` for Lightning (`lightning.pytorch.Trainer`): a `LiveSession` per fit.

    trainer = L.Trainer(callbacks=[SignalchainCallback()], logger=TensorBoardLogger("logs"))

Where gradients exist: in automatic optimisation Lightning calls `optimizer.step(closure)`, and the
closure runs training_step and backward; `on_before_optimizer_step` runs inside it, after backward
and before gradient clipping, so the Monitor's norm is the unclipped one. The loss comes from
`on_before_backward` (`on_train_batch_end` is after the update: too late to withhold it); the
replay is `pl_module.training_step(batch, batch_idx)`. A non-finite step's update is withheld by a
guard on the torch optimizer inside the `LightningOptimizer`: the closure still runs, the update
does not. TensorBoard scalars go to the trainer's own `TensorBoardLogger` writer when it has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback

from ..checks.optimisation.schedulers import STEPS_BEFORE, ScheduleState, judge_schedulers
from ..probes.forward_tap import loss_of
from ._callback import SessionOwner

__all__ = ["SignalchainCallback"]


def _tensorboard_writer(trainer: Any) -> Any:
    """The SummaryWriter of the trainer's TensorBoardLogger, if it has one (rank 0 only has one)."""
    try:
        from lightning.pytorch.loggers import TensorBoardLogger
    except ImportError:
        return None
    if int(getattr(trainer, "global_rank", 0) or 0) != 0:  # ranks > 0 get a stand-in that writes nothing
        return None
    for logger in getattr(trainer, "loggers", None) or []:
        if isinstance(logger, TensorBoardLogger):
            writer = logger.experiment
            return writer if hasattr(writer, "add_scalar") else None
    return None


class SignalchainCallback(SessionOwner, Callback):
    """signalchain's live checks in a Lightning run; see `LiveSession` for the arguments.

    out_dir: None puts the output under the trainer's `default_root_dir`. After fit, `findings` lists
    what it found.
    """

    label = "lightning"

    def __init__(self, *, out_dir: str | Path | None = None, every: int = 50, ratio_every: int = 20,
                 tensorboard: bool | str | Any = True, sample_every: int = 0,
                 sample_fn: Callable[[torch.nn.Module], tuple[Any, int]] | None = None,
                 golden: bool = True, skip_nonfinite: bool = True, strict: bool = False,
                 watchdog_timeout: float | None = 600.0, first_timeout: float | None = None,
                 distributed: bool | None = None, logger: logging.Logger | None = None):
        self._configure(out_dir=out_dir, tensorboard=tensorboard, every=every, ratio_every=ratio_every,
                        sample_every=sample_every, sample_fn=sample_fn, golden=golden, skip_nonfinite=skip_nonfinite,
                        strict=strict, watchdog_timeout=watchdog_timeout, first_timeout=first_timeout,
                        distributed=distributed, logger=logger)
        self._step = 0  # the optimizer step the open batches belong to
        self._batch: Any = None
        self._batch_idx = 0
        self._index_of: dict[int, int] = {}  # id(batch) -> batch_idx, for the open step's micro-batches
        self._judged = False  # on_before_optimizer_step ran for the open step
        self._module: Any = None
        self._schedules_read = False  # the configured LR schedulers were judged once, at STEPS_BEFORE

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        out_dir = Path(self.out_dir) if self.out_dir is not None else Path(trainer.default_root_dir) / "signalchain"
        self._open(out_dir, self.tensorboard, "lightning")
        self._guarded("on_train_start", self._start, trainer, pl_module)

    def _start(self, trainer: Any, pl_module: Any) -> None:
        session = self.session
        assert session is not None
        if self.tensorboard is True:
            writer = _tensorboard_writer(trainer)
            if writer is not None:
                session.tb.retarget(writer)
        self._module, self._judged = pl_module, False
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
        session.attach(pl_module, optimizer, scaler=scaler, replay=self._replay, rank=int(trainer.global_rank),
                       world=int(trainer.world_size))
        session.first_step_optimizers(list(trainer.optimizers or []))

    def _replay(self, module: Any, batch: Any) -> Any:
        """The step's loss again, from training_step (its `self.log` calls are made as training_step's)."""
        was = getattr(module, "_current_fx_name", None)
        module._current_fx_name = "training_step"
        try:
            out = module.training_step(batch, self._index_of.get(id(batch), self._batch_idx))
        finally:
            module._current_fx_name = was
        return out if isinstance(out, torch.Tensor) else loss_of(out)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        session = self.session
        if session is None:
            return
        self._batch, self._batch_idx = batch, batch_idx
        if not session.in_step:  # gradient accumulation: later batches join the open step
            self._step, self._judged, self._index_of = int(trainer.global_step), False, {}
            session.begin_step(self._step, batch)
        self._index_of[id(batch)] = batch_idx

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        if self.session is not None:
            self.session.observe(loss, batch=self._batch)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.session is not None:
            self._judged = True
            self.session.before_optimizer(self._step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        session = self.session
        if session is None:
            return
        session.observe(output=outputs, batch=batch)  # logits / per-codebook values, if training_step returns them
        if self._judged:  # this batch closed an optimizer step
            self._judged = False
            session.end_step(self._step)
        if not self._schedules_read and int(trainer.global_step) >= STEPS_BEFORE:
            self._schedules_read = True
            self._guarded("schedulers", self._read_schedules, trainer, pl_module)

    def _read_schedules(self, trainer: Any, pl_module: Any) -> None:
        """Each configured LR scheduler against the steps taken (before Lightning's own step of this batch:
        one short at most, never zero for a scheduler that steps)."""
        states = []
        for cfg in getattr(trainer, "lr_scheduler_configs", None) or []:
            sched = getattr(cfg, "scheduler", None)
            stepped = getattr(sched, "last_epoch", None)
            if sched is None or not isinstance(stepped, int):
                continue  # ReduceLROnPlateau and others without a step count
            lrs = getattr(sched, "_last_lr", None) or []
            states.append(ScheduleState(type(sched).__name__, str(getattr(cfg, "interval", "epoch")),
                                        int(getattr(cfg, "frequency", 1) or 1), stepped,
                                        float(lrs[0]) if lrs else None))
        manual = not bool(getattr(pl_module, "automatic_optimization", True))
        for finding in judge_schedulers(states, int(trainer.global_step), int(trainer.current_epoch), manual):
            assert self.session is not None
            self.session._add(finding)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if self.session is not None:  # a validation batch is progress: no stall while validating
            self.session.progress()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self.session is not None:
            self.session.mark("checkpoint")  # until the next batch: writing the checkpoint

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close()
