"""`SignalchainCallback` for HF `transformers.Trainer` (and `Seq2SeqTrainer`): a `LiveSession` per run.

    trainer = Trainer(model, args, train_dataset=ds, callbacks=[SignalchainCallback()])

Where gradients exist: `on_pre_optimizer_step` runs after the trainer clipped the gradients and
before `optimizer.step()`, so the Monitor judges every optimizer step there (one verdict per step,
however many micro-batches gradient accumulation adds up). HF callbacks never see the loss or the
batch; both come from forward hooks on the model (`output.loss` / `output["loss"]`; the batch is the
forward's kwargs, so the replay is `model(**batch).loss`). A non-finite step's update is withheld by
a guard on the trainer's (accelerate-wrapped) optimizer.

`grad_norm_unclipped`: the norm the Monitor measures at `on_pre_optimizer_step` is after clipping.
It is written when it is provably the unclipped one (no clipping configured, or a norm below
`max_grad_norm`, where clipping changes nothing); on clipped steps the value HF itself logs as
`grad_norm` (its pre-clip norm, in `on_log`, every `logging_steps`) is written instead.
Output goes to `out_dir` (default: `<args.output_dir>/signalchain`); TensorBoard to
`$TENSORBOARD_LOGGING_DIR` when the trainer reports to TensorBoard there, else `out_dir/tensorboard`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from ..probes.forward_tap import call_with, loss_of
from ._callback import SessionOwner

__all__ = ["SignalchainCallback"]


def _replay(model: torch.nn.Module, batch: Any) -> Any:
    return loss_of(call_with(model, batch))


class SignalchainCallback(SessionOwner, TrainerCallback):
    """signalchain's live checks in an HF Trainer run; see `LiveSession` for the arguments.

    out_dir: None puts the output under the trainer's `output_dir`. replay: `fn(model, batch) -> loss`
    recomputing a step (default: `model(**batch).loss`). After training, `findings` lists what it found.
    """

    label = "hf"

    def __init__(self, *, out_dir: str | Path | None = None, every: int = 50, ratio_every: int = 20,
                 tensorboard: bool | str | Any = True, sample_every: int = 0,
                 sample_fn: Callable[[torch.nn.Module], tuple[Any, int]] | None = None,
                 golden: bool = True, skip_nonfinite: bool = True, strict: bool = False,
                 watchdog_timeout: float | None = 600.0, first_timeout: float | None = None,
                 distributed: bool | None = None, logger: logging.Logger | None = None,
                 replay: Callable[[torch.nn.Module, Any], Any] | None = None):
        self.replay = replay
        self._configure(out_dir=out_dir, tensorboard=tensorboard, every=every, ratio_every=ratio_every,
                        sample_every=sample_every, sample_fn=sample_fn, golden=golden, skip_nonfinite=skip_nonfinite,
                        strict=strict, watchdog_timeout=watchdog_timeout, first_timeout=first_timeout,
                        distributed=distributed, logger=logger)

    def _tensorboard(self, args: Any, out_dir: Path) -> bool | str | Any:
        if self.tensorboard is not True:
            return self.tensorboard
        env = os.environ.get("TENSORBOARD_LOGGING_DIR")
        if env and "tensorboard" in (getattr(args, "report_to", None) or []):
            return env  # beside the trainer's own TensorBoard scalars
        return out_dir / "tensorboard"

    def on_train_begin(self, args: Any, state: Any, control: Any, model: torch.nn.Module | None = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        out_dir = Path(self.out_dir) if self.out_dir is not None else Path(args.output_dir) / "signalchain"
        self._open(out_dir, self._tensorboard(args, out_dir), "hf_trainer")
        self._guarded("on_train_begin", self._begin, args, model, optimizer)

    def _begin(self, args: Any, model: torch.nn.Module, optimizer: Any) -> None:
        session = self.session
        assert session is not None
        clip = float(getattr(args, "max_grad_norm", 0.0) or 0.0)
        session.clip_norm = clip if clip > 0 else None
        session.attach(model, optimizer, scaler=getattr(optimizer, "scaler", None), replay=self.replay or _replay,
                       rank=int(getattr(args, "process_index", 0)), world=int(getattr(args, "world_size", 1)))
        session.watch_forward(model)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self.session.begin_step(state.global_step)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self.session.before_optimizer(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:  # global_step already counts the step that just ended
            self.session.end_step(state.global_step - 1)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:  # an evaluation batch is progress: no stall while evaluating
            self.session.progress()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if self.session is not None:
            self._guarded("on_log", self._log, state.global_step - 1, logs or {})

    def _log(self, step: int, logs: dict[str, Any]) -> None:
        session = self.session
        norm = logs.get("grad_norm")
        if session is not None and isinstance(norm, (int, float)) and session.unclipped_at != step:
            session.scalar("grad_norm_unclipped", float(norm), step)  # HF's pre-clip norm of that step
            session.judge_grad_norm(step, float(norm))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()
