"""Judges of the crop and the codec tokens of one recorded step."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..trace import Trace
from ._util import as_bool_mask, value
from .base import make

__all__ = ["judge_crop", "judge_tokens", "TOKEN_CHECKS"]

CHECK = "checks.tokens"
SILENCE_DOMINANT = 0.5  # share of valid frames that are one and the same code pattern


def judge_crop(trace: Trace) -> list[Finding]:
    """Crops must lie inside the clip, and inside its real (unpadded) part when the clip allows it."""
    crop = value(trace, "crop")
    rec = trace.get("crop")
    if crop is None or rec is None or crop.ndim != 2 or crop.shape[1] < 2:
        return []
    lengths = rec.meta.get("lengths")
    source = next((trace[n] for n in ("audio.mono", "audio.resampled") if n in trace), None)
    total = int(source.shape[-1]) if source is not None and source.shape else None
    start, end = crop[:, 0].astype(np.int64), crop[:, 1].astype(np.int64)
    out: list[Finding] = []
    outside = (start < 0) | (end <= start) | ((end > total) if total is not None else False)
    if np.any(outside) and total is not None and np.any((start < 0) | (end <= start)):
        idx = [int(i) for i in np.flatnonzero(outside)]
        out.append(
            make(
                "crop.out_of_bounds",
                "error",
                "crop",
                f"crop bounds of examples {idx} are invalid (start {start[idx].tolist()}, end {end[idx].tolist()}, "
                f"audio length {total})",
                CHECK,
                hint="clamp crops to [0, length - segment]",
                examples=idx,
            )
        )
    if lengths is None:
        return out
    lengths = np.asarray(lengths, dtype=np.int64)
    segment = end - start
    real = np.clip(np.minimum(end, lengths) - start, 0, None)
    could = np.minimum(segment, lengths)  # the most real audio a window of this size can hold
    share = np.where(could > 0, real / np.maximum(could, 1), 1.0)
    bad = np.flatnonzero(share < 0.5)
    if bad.size:
        idx = [int(i) for i in bad]
        out.append(
            make(
                "crop.in_padding",
                "error",
                "crop",
                f"crops of examples {idx} hold {[round(float(s) * 100) for s in share[bad]]}% of the real audio "
                f"they could (start {start[bad].tolist()} vs clip lengths {lengths[bad].tolist()})",
                CHECK,
                hint="choose the crop start from each clip's own valid length, not the padded batch length",
                examples=idx,
                starts=start[bad].tolist(),
                lengths=lengths[bad].tolist(),
                real_share=share[bad].tolist(),
            )
        )
    return out


def judge_tokens(trace: Trace) -> list[Finding]:
    """Tokens must be valid ids, and not mostly one code pattern (the codec's picture of silence)."""
    tokens = value(trace, "tokens")
    rec = trace.get("tokens")
    if tokens is None or rec is None or tokens.ndim != 3 or rec.meta.get("kind") == "symbolic":
        return []  # symbolic ids (even Octuple's [B, T, F]) are checks/symbolic*'s
    out: list[Finding] = []
    padding = value(trace, "mask.padding")
    card = rec.meta.get("cardinality")
    if card is not None:
        bad = (tokens < 0) | (tokens >= int(card))
        if padding is not None and padding.shape[-1] == tokens.shape[-1]:
            # Padded frames may hold any id (AudioCraft writes its special token there): only real ones count.
            bad &= as_bool_mask(padding, tokens.shape)
        edges = _pattern_edges(tokens, bad)
        if edges is not None:
            out.append(make("tap.read_as", "info", "tokens",
                            f"tokens holds the id {edges['pad_id']} outside [0, {card}) only at each codebook's edges "
                            f"(first {edges['head']} and last {edges['tail']} steps per codebook, the same in every "
                            "example): read as a delay pattern or decoder inputs, not as codes", CHECK,
                            hint="tap the codec's codes before any pattern as tokens, the delayed codes as "
                                 "tokens.pattern and what the model reads as tokens.input (docs/taps.md)",
                            read_as="tokens.pattern", cardinality=int(card), **edges))
            bad = np.zeros_like(bad)
        if bad.any():
            out.append(
                make(
                    "tokens.out_of_range",
                    "error",
                    "tokens",
                    f"{int(bad.sum())} tokens lie outside [0, {card}) "
                    f"(min {int(tokens[bad].min())}, max {int(tokens[bad].max())})",
                    CHECK,
                    hint="a pad/special id or a codec with another cardinality produced these codes",
                    count=int(bad.sum()),
                    cardinality=int(card),
                )
            )
    valid = as_bool_mask(padding, tokens.shape)[:, 0, :]  # [B, T]
    frames = tokens.transpose(0, 2, 1)[valid]  # [N, K]: one code pattern per valid frame
    if frames.size == 0:
        return out
    patterns, counts = np.unique(frames, axis=0, return_counts=True)
    top = int(np.argmax(counts))
    share = float(counts[top] / counts.sum())
    if share > SILENCE_DOMINANT:
        per_example = [float((tokens[b].T[valid[b]] == patterns[top]).all(axis=1).mean()) if valid[b].any() else 0.0
                       for b in range(tokens.shape[0])]
        out.append(make("tokens.silence_dominant", "error" if share > 0.9 else "warning", "tokens",
                        f"{100 * share:.0f}% of valid frames are the same code pattern {patterns[top].tolist()}",
                        CHECK, hint="the codec saw silence (or near-silence): listen to the audio that was encoded and "
                                    "check its level and crop", pattern=patterns[top].tolist(), share=share,
                        per_example=per_example))
    return out


def _pattern_edges(tokens: np.ndarray, bad: np.ndarray) -> dict | None:
    """Out-of-range ids that are one id, only at the start and end of each codebook's row, with the
    same extent in every example: the pad/start id of a delay pattern or of decoder inputs (a tap
    that holds those, not codes). None for anything else (ids that leak into the codes themselves)."""
    if not bad.any() or len(np.unique(tokens[bad])) != 1 or tokens.shape[-1] < 2:
        return None
    t = bad.shape[-1]
    head = np.argmin(bad, axis=-1) + np.where(bad.all(axis=-1), t, 0)  # leading run per (b, k)
    tail = np.argmin(bad[..., ::-1], axis=-1)
    if (bad.all(axis=-1)).any() or not ((head + tail) == bad.sum(axis=-1)).all():
        return None
    if not ((head == head[:1]).all() and (tail == tail[:1]).all()) or not head[0].any():
        return None  # differs per example, or never at the start (codes padded at the end: those are codes)
    return {"pad_id": int(tokens[bad][0]), "head": head[0].tolist(), "tail": tail[0].tolist()}


TOKEN_CHECKS = (judge_crop, judge_tokens)
