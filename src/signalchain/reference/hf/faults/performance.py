"""Slow training and stalled pipelines around HF MusicGen: audio decoded again on every access,
a NaN-hunting hook that syncs after every module, and a checkpoint pushed synchronously.

Delays that stand for I/O (a network read, an upload) are real sleeps, kept small so the
catalogue stays fast: ~30 ms per example and batch; the upload is sized against the steps before it
(eight of the longest, at least 0.8 s), so that it stays a stall on a slow machine."""

from __future__ import annotations

import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import soxr
import torch

from ...faults._pace import Pace, timed_call
from ._registry import fault, patch_model
from ._util import no_tap

if TYPE_CHECKING:
    from signalchain import StepOutput
    from signalchain.integrations.hf_musicgen import Batch

    from ..pipeline import HFBedPipeline

FAMILY = "performance"
SECTION = "Slow training and stalled pipelines"

READ_LATENCY_S = 0.015  # one read of an audio file from network storage
STALL_S = 0.8  # floor; the upload takes STALL_FACTOR × the longest step before it
STALL_FACTOR = 8.0


@fault("audio_decoded_on_every_access", FAMILY, "waiting for data: every clip is decoded and resampled on each access",
       SECTION, ["perf.data_bound"], "loader", symptom="slow")
def _audio_decoded_on_every_access(p: HFBedPipeline) -> None:
    loader = p.loader

    def decode(example: Any) -> Any:
        time.sleep(READ_LATENCY_S)  # the file is read again from network storage
        return soxr.resample(example.audio.T, example.sample_rate, p.codec_rate)  # and resampled again

    def decoding_loader(split: str = "train", seed: int = 0) -> Iterator[Batch]:
        for batch in loader(split, seed):
            # Bug: `ds.cast_column("audio", Audio(sampling_rate=16000))` makes `datasets` decode and
            # resample lazily, on every access; the collator reads `row["audio"]` twice (once in a
            # duration filter, once for the array), with `num_workers=0`. Each batch waits for 8 reads
            # and 8 resamplings in the training process, longer than the step computes.
            for example in batch.examples:
                decode(example)
                decode(example)
            yield batch

    p.loader = decoding_loader  # type: ignore[method-assign]


@fault("isfinite_assert_hooks", FAMILY, "synchronisation-bound: a host sync after every module, every step",
       SECTION, ["perf.sync_bound"], "runtime", symptom="slow")
def _isfinite_assert_hooks(p: HFBedPipeline) -> None:
    def check(module: Any, args: Any, output: Any) -> None:
        # Bug: a NaN hunt's forward hook, left registered on every module: `if not
        # torch.isfinite(out).all(): raise ...`. The `if` reads the tensor's value on the host, so
        # each of the ~100 modules makes the host wait for the device, every forward.
        if isinstance(output, torch.Tensor) and output.is_floating_point() and not torch.isfinite(output).all():
            raise FloatingPointError(f"non-finite output in {type(module).__name__}")

    def edit(model: Any) -> None:
        for module in model.modules():
            module.register_forward_hook(check)

    patch_model(p, edit)


@fault("blocking_checkpoint_push", FAMILY, "a stall: the step blocks on a synchronous checkpoint upload",
       SECTION, ["perf.stall"], "runtime", symptom="slow")
def _blocking_checkpoint_push(p: HFBedPipeline) -> None:
    train_step = p.train_step
    steps: weakref.WeakKeyDictionary[Any, Pace] = weakref.WeakKeyDictionary()

    def train_step_with_push(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        pace = steps.setdefault(optimizer, Pace())
        upload = pace.scaled(STALL_FACTOR, STALL_S, Pace.longest)  # a checkpoint is many steps' worth
        out = timed_call(train_step, pace)(model, optimizer, batch, tap)
        if len(pace.seconds) % 50 == 3:
            # Bug: `save_steps=50` with `push_to_hub(blocking=True)` run inside the step (a callback
            # on_save): the step waits for the checkpoint to be written and uploaded.
            folder = tempfile.mkdtemp(prefix="hf-bed-ckpt-")
            try:
                model.save_pretrained(folder)
                time.sleep(upload)  # the upload
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return out

    p.train_step = train_step_with_push  # type: ignore[method-assign]
