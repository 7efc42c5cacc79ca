"""What one step shows of a batch's audio, for the splits family (leaks between splits).

Both read a step through `collect` and stop it as soon as the audio is seen: what follows
(encoding, the model) is not needed to match a loader's examples or recover a standardisation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tensor import to_numpy
from ..audit.taps import AudioTap
from ..pipeline import Pipeline
from ..probes.collect import Collected, collect
from ..trace.vocabulary import is_audio_stage, stage_rank

__all__ = ["loader_clips", "audio_taps"]

LAST_AUDIO = stage_rank("audio.cropped")
_PASSIVE = ("caption", "metadata", "crop")  # stages that may come between the audio stages


def loader_clips(p: Pipeline, batch: Any, model: Any) -> list[np.ndarray] | None:
    """The examples of one loader batch as the step sees them (the `audio.original` tap), each its
    valid part `[C, T_i]`; None when the step taps no audio (the batch itself is opaque)."""
    got = collect(p, model, batch, ("audio.original",), stop_after="audio.original")
    seen = got.first("audio.original")
    if seen is not None:
        audio = np.asarray(to_numpy(seen.value), dtype=np.float32)
        if audio.ndim == 2:
            audio = audio[:, None, :]
        lengths = seen.meta.get("lengths")
        n = [int(v) for v in to_numpy(lengths)] if lengths is not None else [audio.shape[-1]] * len(audio)
        return [audio[i, :, : n[i]] for i in range(len(audio))]
    return None  # the batch is opaque (DESIGN §3): without an audio tap there is nothing to compare


def _past_the_audio(stage: str, got: Collected) -> bool:
    """The cropped audio (what follows is encoding), or the first stage after the audio that is
    neither audio nor one of the passive stages (tokens, conditions, logits)."""
    if is_audio_stage(stage):
        return stage_rank(stage) >= LAST_AUDIO
    return len(got) > 0 and stage not in _PASSIVE


def audio_taps(p: Pipeline, batch: Any, model: Any) -> list[AudioTap]:
    """The audio stages of one step on `batch`, with their values; the step stops after the cropped
    audio or at the first stage past the audio (tokens, conditions, logits): nothing later is needed."""
    got = collect(p, model, batch, is_audio_stage, stop_after=_past_the_audio, copy=True)
    return [AudioTap(t.stage, np.array(to_numpy(t.value), dtype=np.float32), dict(t.meta)) for t in got.taps]
