"""Repetition on the note level: generated symbolic tokens decoded back to notes, beside the golden
batch's tokens decoded the same way (the baseline comes from the pipeline's own data).

Runs only for a symbolic pipeline (golden `tokens` tapped with `kind="symbolic"`) that has
`decode_notes` and whose `generate` returns token ids `[B, T]`; otherwise it measures nothing.
The generated tokens are those of the family's measure when it ran (the configured sampling of its
last checkpoint: a fresh model's tokens rarely decode to music); else one generate call here, on a
fresh model, with the configured sampling.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._tensor import to_numpy
from ...pipeline import capabilities
from ...records.symbolic import NoteRepetitionMeasurement
from ...symbolic.notes import NOTE_COLUMNS
from ...symbolic.repetition import batch_repetition
from ...symbolic.vocab import quarters_per_beat
from .._outputs import read_generated
from .._seed import seed_everything
from ..context import Context
from .runs import call_generate, take

__all__ = ["measure_note_repetition"]


def _ids(result: Any) -> np.ndarray | None:
    """Generated token ids as [B, T] (a symbolic generate's output read as one-codebook codes)."""
    codes = read_generated(result).codes
    if codes is None or codes.ndim != 3 or codes.shape[1] != 1:
        return None
    return codes[:, 0, :]


def _notes(p: Any, ids: np.ndarray) -> np.ndarray:
    table = np.asarray(to_numpy(p.decode_notes(torch.as_tensor(ids).long())), dtype=np.float32)
    return table.reshape(-1, len(NOTE_COLUMNS))


def _bars(ctx: Context, n: int) -> list[float]:
    """Each golden example's bar length in quarter notes (4/4 where the source does not say)."""
    rec = ctx.golden().trace.get("midi.source")
    tss = list(rec.meta.get("time_signatures") or []) if rec is not None else []
    out = []
    for i in range(n):
        ts = tss[i] if i < len(tss) and isinstance(tss[i], (list, tuple)) and len(tss[i]) == 2 else (4, 4)
        out.append(float(ts[0]) * quarters_per_beat(ts))
    return out


def _from_family(outcome: Any) -> tuple[np.ndarray, str] | None:
    """The configured run of the family's last checkpoint (else its fresh model's), as ids [B, T]."""
    report, codes = getattr(outcome, "report", None), getattr(outcome, "codes", None) or {}
    labels = [r.label for c in reversed(getattr(report, "checkpoints", None) or []) for r in c.runs[:1]]
    for label in [*labels, "configured"]:
        got = codes.get(label)
        if got is not None and np.ndim(got) == 3 and np.shape(got)[1] == 1:
            return np.asarray(got)[:, 0, :], label
    return None


def measure_note_repetition(ctx: Context, outcome: Any = None) -> NoteRepetitionMeasurement | None:
    p = ctx.pipeline
    if not {"generate", "decode_notes"} <= set(capabilities(p)):
        return None
    rec = ctx.golden().trace.get("tokens")
    if rec is None or rec.meta.get("kind") != "symbolic" or rec.value is None or np.ndim(rec.value) != 2:
        return None
    golden_ids = np.asarray(rec.value)
    length = int(min(golden_ids.shape[1], ctx.budget.gen_symbolic_tokens))
    sampling: dict[str, Any] = {"max_frames": length, "seed": ctx.seed}
    got = _from_family(outcome)
    if got is not None:
        ids, sampling = got[0], {"run": got[1]}
    else:
        model = ctx.fresh_model()
        seed_everything(ctx.seed)
        with torch.no_grad():
            ids = _ids(call_generate(p, model, take(ctx.batch(), ctx.budget.gen_prompts), sampling))
        if ids is None:
            return None
    gen = _notes(p, ids)
    gold = _notes(p, golden_ids)
    bars = _bars(ctx, max(golden_ids.shape[0], ids.shape[0]))
    return NoteRepetitionMeasurement(generated=batch_repetition(gen, ids.shape[0], bars[:ids.shape[0]]),
                                     golden=batch_repetition(gold, golden_ids.shape[0], bars[:golden_ids.shape[0]]),
                                     tokens=int(ids.shape[1]), sampling=dict(sampling))
