"""Targets visible in the model's inputs: the input at position t must not be the target at t.

Two sources of inputs: the ids the embedding probe saw entering the model (`judge_target_leak`), and
a tapped `tokens.input` (or a `tokens.pattern` that holds decoder inputs) read by the layout
(`judge_tapped_inputs`). docs/taps.md says what each tap holds."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..trace import Trace
from ..trace.layout import read_layout
from ..trace.shifts import best_lags
from .base import make

__all__ = ["judge_target_leak", "judge_tapped_inputs"]

TAPS_DOC = "docs/taps.md"

CHECK = "checks.inputs"
COPIES = 0.9  # share of counted positions where the input equals a target
MAX_LAG = 3  # input lags tried: 1 is right (shifted behind the start token), 0 is a copy


def _candidates(ids: np.ndarray, b: int, k: int, t: int) -> list[tuple[int | None, np.ndarray]]:
    """(codebook or None for all, ids laid as [B, K', T']) for the layouts an embedding input may have."""
    if ids.shape == (b, k, t):
        return [(None, ids)]
    if ids.shape == (b * k, t):
        return [(None, ids.reshape(b, k, t))]
    if ids.shape == (b, t):
        return [(c, ids[:, None, :]) for c in range(k)]
    return []


def judge_target_leak(trace: Trace, inputs: list[dict[str, Any]] | None) -> list[Finding]:
    """For every embedding input laid out like the targets, compare it with the targets at the same
    position and one position earlier, over the positions the loss counts. Correctly shifted inputs
    agree best one position back; inputs that agree best at the same position are the targets."""
    view = read_layout(trace)
    if not inputs or view.targets is None:
        return []
    targets = view.targets
    mask = view.mask if view.mask is not None else np.ones(targets.shape, bool)
    b, k, t = targets.shape
    worst: tuple[float, float, str, int | None, int] | None = None
    for entry in inputs:
        for codebook, ids in _candidates(entry["ids"], b, k, t):
            tg = targets if codebook is None else targets[:, codebook : codebook + 1]
            m = mask if codebook is None else mask[:, codebook : codebook + 1]
            agree = {s: _agreement(ids, tg, m, s) for s in range(0, MAX_LAG + 1)}
            if agree[1] is None:
                continue
            lag = max((s for s in agree if agree[s] is not None), key=lambda s: agree[s])
            best = agree[lag]
            if lag != 1 and best >= COPIES and best > agree[1] and (worst is None or best > worst[0]):
                worst = (best, agree[1], entry["module"], codebook, lag)
    if worst is None:
        return []
    same, previous, module, codebook, lag = worst
    where = f"`{module}`" + (f" (codebook {codebook})" if codebook is not None else "")
    if lag == 0:
        what = (f"the model is fed its own targets: the ids entering {where} equal the target at the same "
                f"position in {100 * same:.1f}% of the positions the loss counts (one position earlier: "
                f"{100 * previous:.1f}%)")
        hint = ("the decoder inputs are not shifted behind the start token (e.g. decoder_input_ids=labels); let the "
                "model shift the labels itself, or shift them right by one: the loss looks too good because the "
                "model only copies")
    else:
        what = (f"the ids entering {where} equal the target {lag} positions earlier in {100 * same:.1f}% of the "
                f"positions the loss counts, and the one just before in only {100 * previous:.1f}%: the inputs are "
                f"shifted {lag} times, so the model predicts {lag - 1} step(s) too far ahead")
        hint = "shift the decoder inputs once (HF does it itself from the labels: do not shift them beforehand)"
    return [make("targets.misaligned", "error", "targets", what, CHECK, hint=hint, module=module, codebook=codebook,
                 same_position=same if lag == 0 else None, previous_position=previous, input_lag=lag,
                 agreement=same, layout=view.describe())]


def _agreement(ids: np.ndarray, tg: np.ndarray, m: np.ndarray, lag: int) -> float | None:
    """Share of counted positions t where the input at t is the target at t - lag."""
    a, b, w = (ids, tg, m) if lag == 0 else (ids[..., lag:], tg[..., :-lag], m[..., lag:])
    n = int(w.sum())
    return float(((a == b) & w).sum() / n) if n else None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def judge_tapped_inputs(trace: Trace) -> list[Finding]:
    """What the model reads, as tapped, against its targets, over the positions the loss counts.

    On the targets' own time axis (HF's decoder inputs and labels, a plain loop's input and target)
    the input at t + 1 must be the target at t: the same position means the model is shown its
    answer (`targets.misaligned`), two steps or more means it predicts too far ahead. Where the input
    lives in another time than the targets (AudioCraft's pattern sequence against frame-time targets),
    only a copy at the same position is a verdict any delay pattern agrees with; the rest is not
    judged. A tokens.pattern read as decoder inputs is said as `tap.read_as` (info)."""
    view = read_layout(trace)
    out: list[Finding] = []
    if view.pattern_role == "input":
        out.append(make("tap.read_as", "info", "tokens.pattern",
                        "tokens.pattern holds decoder inputs (a start token, then the targets one step later): "
                        f"read as tokens.input; tap it as tokens.input ({TAPS_DOC})", CHECK,
                        hint=f"tap what the model reads as tokens.input and the delayed codes (before the shift) as "
                             f"tokens.pattern; {TAPS_DOC} shows both for an HF MusicGen loop",
                        read_as="tokens.input", notes=list(view.notes), layout=view.describe()))
    x, y = view.inputs, view.targets
    if x is None or y is None or x.shape[:2] != y.shape[:2]:
        return out
    mask = view.mask if view.mask is not None else np.ones(y.shape, bool)
    aligned = x.shape[-1] == y.shape[-1]
    span = max(x.shape[-1] - y.shape[-1], 0)
    per_k = best_lags(x, y, mask, range(0, span + MAX_LAG + 1))
    if any(not a for a in per_k):
        return out
    stage = view.input_stage
    agreement = [{int(lag): round(v, 4) for lag, v in a.items() if lag <= MAX_LAG + span} for a in per_k]
    ev = {"input_stage": stage, "agreement_by_lag": agreement, "layout": view.describe()}

    def beats(a: dict[int, float], lag: int) -> bool:
        return a.get(lag, 0.0) >= COPIES and all(a[lag] > v for lg, v in a.items() if lg != lag)

    copies = [k for k, a in enumerate(per_k) if beats(a, 0)]
    if copies:
        same = float(np.mean([per_k[k][0] for k in copies]))
        previous = [per_k[k].get(1) for k in copies]
        return out + [make(
            "targets.misaligned", "error", "targets",
            f"the model is fed its own targets: {stage} equals the target at the same position in {100 * same:.1f}% "
            f"of the positions the loss counts (codebooks {copies}; one step earlier: "
            f"{', '.join(_pct(p) for p in previous)})", CHECK,
            hint="the decoder inputs are the targets, not shifted behind the start token (e.g. decoder_input_ids = "
                 "labels): shift them right by one (HF: `shift_tokens_right(labels, pad_id, start_id)`, or pass only "
                 f"labels and let the model shift them); {TAPS_DOC}",
            codebooks=copies, same_position=same, input_lag=0, **ev)]
    if aligned:
        late = {k: max(a, key=a.get) for k, a in enumerate(per_k)}
        late = {k: lag for k, lag in late.items() if lag >= 2 and beats(per_k[k], lag)}
        if late:
            lags = sorted(set(late.values()))
            one = [per_k[k].get(1) for k in late]
            return out + [make(
                "targets.misaligned", "error", "targets",
                f"{stage} equals the target {', '.join(map(str, lags))} steps earlier in "
                f"{', '.join(_pct(per_k[k][lag]) for k, lag in late.items())} of the positions the loss counts "
                f"(codebooks {sorted(late)}), one step earlier in only {', '.join(_pct(p) for p in one)}: the inputs "
                f"are shifted {max(lags)} times, so the model predicts {max(lags) - 1} step(s) too far ahead", CHECK,
                hint="shift the decoder inputs once (HF shifts the labels itself when only labels are passed: do not "
                     f"shift them beforehand); {TAPS_DOC}",
                codebooks=sorted(late), input_lag=max(lags), **ev)]
    unread = [k for k, a in enumerate(per_k) if max(a.values()) < COPIES]
    if unread:
        best = [round(max(per_k[k].values()), 3) for k in unread]
        out.append(make("tap.ambiguous", "info", stage,
                        f"{stage} matches the targets at no shift from 0 to {span + MAX_LAG} steps (codebooks "
                        f"{unread}, best agreement {best}): whether the model sees its answer cannot be told from it",
                        CHECK,
                        hint=f"tap the ids the model reads, in the targets' layout ({TAPS_DOC}); the embedding probe "
                             "of the data family judges what enters the model in any case",
                        codebooks=unread, best_agreement=best, **ev))
    return out
