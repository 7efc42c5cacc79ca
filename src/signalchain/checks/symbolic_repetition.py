"""Repetition of generated music on the note level, judged against the pipeline's own golden notes.

The baseline is the same measure on the golden batch (what the model is trained to produce): music
repeats by nature, so only repetition well beyond the data's own is a finding.
"""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..records.symbolic import NoteRepetitionMeasurement
from ..symbolic.repetition import NGRAM
from .base import make

__all__ = ["judge_note_repetition", "NGRAM_MARGIN", "LOOP_MARGIN"]

CHECK = "checks.symbolic"
NGRAM_MARGIN = 0.25  # repeated-n-gram share above the most repetitive golden example
LOOP_MARGIN = 0.25  # share of bars inside one loop above the golden batch's largest


def judge_note_repetition(m: NoteRepetitionMeasurement) -> list[Finding]:
    """Generated notes far more repetitive than the golden notes: n-grams of (interval, IOI, duration), loops."""
    gen = [r for r in m.generated if r.notes > NGRAM]
    base = [r for r in m.golden if r.notes > NGRAM]
    if not gen or not base:
        return []
    g_ngram = float(np.median([r.ngram_repetition for r in gen]))
    b_ngram = float(max(r.ngram_repetition for r in base))
    g_loop = float(np.median([r.loop_share for r in gen]))
    b_loop = float(max(r.loop_share for r in base))
    ngram_high = g_ngram > max(b_ngram + NGRAM_MARGIN, 2 * b_ngram)
    # A loop counts when it repeats at least once more than its period and covers half the piece.
    looped = [r for r in gen if r.loop_period and r.loop_bars >= 2 * r.loop_period]
    loop_high = bool(looped) and g_loop >= 0.5 and g_loop > b_loop + LOOP_MARGIN
    if not (ngram_high or loop_high):
        return []
    period = int(np.median([r.loop_period for r in looped])) if looped else 0
    said = []
    if ngram_high:
        said.append(f"{100 * g_ngram:.0f}% of {NGRAM}-note phrases (interval, onset gap, duration) repeat an earlier "
                    f"one, against at most {100 * b_ngram:.0f}% in the golden notes")
    if loop_high:
        said.append(f"{100 * g_loop:.0f}% of the bars sit in one loop of {period} bar(s), against at most "
                    f"{100 * b_loop:.0f}% in the golden notes")
    return [make("symbolic.repetitive", "error" if ngram_high and loop_high else "warning", "generation",
                 "generated music repeats on the note level: " + "; ".join(said), CHECK,
                 hint="compare plain sampling (temperature 1, no top-k/top-p) with the configured one: if the loop "
                      "stays, the model learnt it (repetitive training windows); if it goes, the sampler narrows",
                 ngram_repetition=g_ngram, golden_ngram_repetition=b_ngram, loop_share=g_loop,
                 golden_loop_share=b_loop, loop_period_bars=period, prompts=len(gen), tokens=m.tokens,
                 per_prompt=[r.to_dict() for r in m.generated])]
