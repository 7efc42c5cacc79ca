"""Hand-made steps whose decoder inputs are tapped, in the conventions users write them (docs/taps.md).

`hf_inputs_trace`: HF MusicGen's step (`_traces.hf_step_trace`) plus the decoder input ids a loop
builds itself the way `shift_tokens_right` does (the start token, then the labels one step later,
-100 as the pad id), tapped as `tokens.input` or `tokens.pattern` in one of HF's layouts.
`audiocraft_trace`: AudioCraft's LM step: the pattern sequence (an empty first step, then codebook
k of frame t at step t + k + 1) read by the model, logits and targets in frame time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from _traces import hf_step_trace, make_trace

CARD = 64
START = PAD = CARD  # MusicGen: the decoder start, pad and special id are all the cardinality


def shifted(labels_btk: np.ndarray, lag: int = 1) -> np.ndarray:
    """Decoder inputs `[B, K, T']` from labels `[B, T', K]`: `lag` start columns, then the labels
    (lag 1: `shift_tokens_right`; lag 0: the labels themselves; lag 2: shifted twice)."""
    labels = np.where(labels_btk == -100, PAD, labels_btk).transpose(0, 2, 1)
    if lag == 0:
        return labels.copy()
    return np.concatenate([np.full(labels.shape[:2] + (lag,), START), labels[..., :-lag]], axis=-1)


def in_layout(ids: np.ndarray, layout: str) -> np.ndarray:
    b, k, t = ids.shape
    return {"BKT": ids, "BTK": ids.transpose(0, 2, 1).copy(), "(BK)T": ids.reshape(b * k, t)}[layout]


def hf_inputs_trace(tokens: np.ndarray, tap_as: str = "tokens.input", layout: str = "BKT", lag: int = 1,
                    valid_frames: list[int] | None = None, keep_pattern: bool = False, **meta: Any):
    """HF's step with decoder inputs tapped as `tap_as` (the delayed codes tapped as tokens.pattern
    too when `keep_pattern`)."""
    base = hf_step_trace(tokens, valid_frames=valid_frames, tap_pattern=keep_pattern)
    stages = [(r.name, r.value, dict(r.meta)) for r in base]
    inputs = in_layout(shifted(np.asarray(base.value("targets")), lag), layout)
    at = next(i for i, s in enumerate(stages) if s[0] == "targets")
    stages.insert(at, (tap_as, inputs, meta))
    return make_trace(*stages)


def pattern_sequence(tokens: np.ndarray, delays: list[int] | None = None, empty_first: bool = True,
                     valid_only: bool = False) -> np.ndarray:
    """AudioCraft's delayed pattern sequence `[B, K, S]`: an empty (special) first step when
    `empty_first`, then codebook k of frame t at step t + delay(k) (+1), the special id elsewhere.
    `valid_only` keeps the steps up to the last one every codebook reaches, as `compute_predictions`
    does by default (S = T + 1)."""
    b, k, t = tokens.shape
    delays = list(range(k)) if delays is None else delays
    first = 1 if empty_first else 0
    seq = np.full((b, k, t + max(delays) + first), PAD, dtype=np.int64)
    for j, d in enumerate(delays):
        seq[:, j, first + d : first + d + t] = tokens[:, j]
    return seq[..., : t + first] if valid_only else seq


def audiocraft_trace(tokens: np.ndarray, tap_as: str = "tokens.input", sequence: np.ndarray | None = None,
                     valid_frames: list[int] | None = None, **meta: Any):
    """AudioCraft's `run_step`: codes `[B, K, T]` with the special id on padded frames and a padding
    mask `[B, K, T]`; the model reads the pattern sequence (`valid_only`); its logits come back in
    frame time `[B, K, T, card]` with a mask of the steps each codebook really had; the targets are
    the codes, and the loss mask is that mask and the padding."""
    b, k, t = tokens.shape
    valid = np.array(valid_frames if valid_frames is not None else [t] * b)
    padding = np.broadcast_to((np.arange(t)[None, :] < valid[:, None])[:, None, :], (b, k, t)).copy()
    codes = np.where(padding, tokens, PAD)
    seq = pattern_sequence(codes, valid_only=True) if sequence is None else sequence
    reached = np.arange(t)[None, None, :] + np.arange(k)[None, :, None] + 1 < seq.shape[-1]  # [1, K, T]
    mask = padding & reached
    return make_trace(("tokens", codes, {"cardinality": CARD}), ("mask.padding", padding),
                      (tap_as, seq, meta), ("targets", codes), ("logits", np.zeros((b, k, t, CARD), np.float32)),
                      ("mask.loss", mask), ("loss", float(np.log(CARD))))
