"""Drums transposed by a pitch-shift augmentation. On a drum track a pitch names an instrument (GM's
channel 10): a shift turns a kick into a snare, a closed hi-hat into a pedal one.

Two kinds of evidence, the stronger first:
- *source against augmented*: where both `midi.source` and `notes.augmented` are tapped, each example's
  drum notes are paired by onset (an example whose drum onsets differ between the two, a crop or a
  time stretch, is not compared). Any pitch change of a paired drum note is wrong, whatever kit piece
  it lands on; every drum note of an example moved by one interval is a transposition (error), other
  changes a remapping of kit pieces (warning).
- *kit membership*, for a notes stage with nothing before it to compare with: drum notes mostly off
  General MIDI's core kit that one shift maps back onto it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.gm import drum_name
from ..symbolic.notes import COL
from ..trace import Trace
from ._symbolic import NOTES_STAGES, notes_of, symbolic_tokens
from .base import make

__all__ = ["judge_drums_transposed", "compare_drums", "CORE_KIT"]

CHECK = "checks.symbolic"
#: General MIDI's core kit: kicks, snare, closed/pedal/open hi-hat, crash, ride.
CORE_KIT = (35, 36, 38, 40, 42, 44, 46, 49, 51)
KIT_SHARE_LOW, KIT_SHARE_BACK = 0.5, 0.8
MIN_DRUM_NOTES = 8
MIN_EXAMPLE_DRUM_NOTES = 4  # one example's drum notes (a bar of kick, snare and hats holds 6-8)
HINT = ("the pitch-shift augmentation transposes drum tracks too: drum pitches name instruments, not notes; skip "
        "tracks with is_drum (channel 10) when transposing")


def _kit_share(pitches: np.ndarray, shift: int = 0) -> float:
    return float(np.isin(pitches - shift, CORE_KIT).mean()) if pitches.size else 0.0


def _shifted_back(pitches: np.ndarray) -> tuple[float, int, float] | None:
    """(share on the kit, best shift back, share after it) when the drums look shifted, else None."""
    share = _kit_share(pitches)
    if share >= KIT_SHARE_LOW:
        return None
    shares = {s: _kit_share(pitches, s) for s in range(-12, 13) if s != 0}
    best = max(shares, key=lambda s: (shares[s], -abs(s)))  # of equal shares, the smallest shift
    return (share, best, shares[best]) if shares[best] >= KIT_SHARE_BACK else None


def _pairs(src: np.ndarray, aug: np.ndarray) -> list[tuple[int, int]] | None:
    """(source pitch, augmented pitch) of one example's drum notes paired by onset; None when the two
    tables do not hold the same drum onsets (another window, another timing: nothing to pair)."""
    if len(src) != len(aug) or not len(src):
        return None
    on_s, on_a = np.round(src[:, COL["onset"]] * 480).astype(np.int64), np.round(aug[:, COL["onset"]] * 480)
    if not np.array_equal(np.sort(on_s), np.sort(on_a.astype(np.int64))):
        return None
    out = []
    for t in np.unique(on_s):
        # one shift keeps the order of the pitches struck together: pair them sorted
        a = np.sort(src[on_s == t, COL["pitch"]].astype(np.int64))
        b = np.sort(aug[on_a == t, COL["pitch"]].astype(np.int64))
        out += list(zip(a.tolist(), b.tolist()))
    return out


def compare_drums(source: np.ndarray, augmented: np.ndarray) -> dict[str, Any] | None:
    """Per example, the drum notes paired between the two tables and the intervals they moved by; None when
    no example could be paired."""
    drum = COL["drum"]
    s, a = source[source[:, drum] > 0.5], augmented[augmented[:, drum] > 0.5]
    per: dict[int, list[tuple[int, int]]] = {}
    for e in sorted(set(s[:, 0].astype(int).tolist()) | set(a[:, 0].astype(int).tolist())):
        got = _pairs(s[s[:, 0] == e], a[a[:, 0] == e])
        if got is not None:
            per[e] = got
    if not per:
        return None
    changed = {e: [(x, y) for x, y in pairs if x != y] for e, pairs in per.items()}
    shifts = {e: sorted({y - x for x, y in moved}) for e, moved in changed.items() if moved}
    # a transposition moves every drum note of the example by one interval
    transposed = {e: s[0] for e, s in shifts.items() if len(s) == 1 and len(changed[e]) == len(per[e])}
    return {"compared": sum(len(p) for p in per.values()), "examples_compared": sorted(per),
            "changed": sum(len(m) for m in changed.values()), "shifts": shifts, "transposed": transposed,
            "moves": Counter((x, y) for m in changed.values() for x, y in m)}


def _melodic_shift(source: np.ndarray, augmented: np.ndarray, e: int) -> int | None:
    """The interval the example's pitched notes moved by, when they all moved by one (a transposition)."""
    drum = COL["drum"]
    s = source[(source[:, 0] == e) & (source[:, drum] < 0.5)]
    a = augmented[(augmented[:, 0] == e) & (augmented[:, drum] < 0.5)]
    if len(s) != len(a) or not len(s):
        return None
    d = np.unique(np.sort(a[:, COL["pitch"]]) - np.sort(s[:, COL["pitch"]]))
    return int(d[0]) if d.size == 1 else None


def _compared(trace: Trace) -> tuple[bool, list[Finding]]:
    """(compared, findings) from `midi.source` against `notes.augmented`."""
    src, aug = notes_of(trace, "midi.source"), notes_of(trace, "notes.augmented")
    if src is None or aug is None:
        return False, []
    got = compare_drums(src[0], aug[0])
    if got is None:
        return False, []
    if not got["changed"]:
        return True, []
    shifts = got["shifts"]
    transposed = got["transposed"]
    melodic = {e: _melodic_shift(src[0], aug[0], e) for e in shifts}
    moves = ", ".join(f"{drum_name(x)} -> {drum_name(y)}" for (x, y), _ in got["moves"].most_common(4))
    by = ", ".join(f"example {e}: {'/'.join(f'{v:+d}' for v in s)}" for e, s in list(shifts.items())[:6])
    same = [e for e, s in transposed.items() if melodic.get(e) == s]
    with_melody = f"; in examples {same[:8]} by the same interval as the pitched notes" if same else ""
    severity = "error" if transposed else "warning"
    how = "a transposition" if transposed else "kit pieces remapped, not every drum note by one interval"
    return True, [make("symbolic.drums_transposed", severity, "notes.augmented",
                       f"{got['changed']} of {got['compared']} drum notes change pitch between midi.source and "
                       f"notes.augmented ({how}; {by}{with_melody}): {moves}", CHECK,
                       hint=HINT if transposed else "an augmentation changes drum pitches, and a drum pitch is an "
                       "instrument: leave the drum track's pitches as they are (or map kit pieces on purpose, "
                       "never by arithmetic on the pitch)",
                       evidence_kind="source_vs_augmented", changed=got["changed"], compared=got["compared"],
                       shifts={str(e): s for e, s in shifts.items()}, shift=next(iter(transposed.values()), None),
                       melodic_shifts={str(e): m for e, m in melodic.items()}, examples=sorted(shifts)[:8],
                       moves=[[x, y, c] for (x, y), c in got["moves"].most_common(8)])]


def _kit_rule(trace: Trace, stages: tuple[str, ...]) -> list[Finding]:
    for stage in stages:
        got = notes_of(trace, stage)
        if got is None:
            continue
        table = got[0]
        drums = table[table[:, COL["drum"]] > 0.5]
        pitches = drums[:, COL["pitch"]].astype(np.int64)
        groups = [(None, pitches)] if pitches.size >= MIN_DRUM_NOTES else []
        groups += [(int(e), pitches[drums[:, 0] == e]) for e in np.unique(drums[:, 0])
                   if (drums[:, 0] == e).sum() >= MIN_EXAMPLE_DRUM_NOTES]
        shifted = [(e, g, found) for e, g in groups if (found := _shifted_back(g)) is not None]
        if not shifted:
            continue
        example, group, (share, best, back) = shifted[0]
        where = f"the {group.size} drum notes of {stage}" if example is None else \
            f"the {group.size} drum notes of example {example} of {stage}"
        examples = sorted({e for e, _, _ in shifted if e is not None}) or sorted({int(e) for e in drums[:, 0]})
        return [make("symbolic.drums_transposed", "error", stage,
                     f"{100 * share:.0f}% of {where} are on the GM kit's core pieces; shifted back by {best:+d} "
                     f"semitones, {100 * back:.0f}% are", CHECK, hint=HINT, evidence_kind="kit_membership",
                     shift=int(best), share=share, share_shifted=back, drum_notes=int(group.size),
                     examples=examples[:8], pitches=sorted(set(group.tolist()))[:16])]
    return []


def judge_drums_transposed(trace: Trace) -> list[Finding]:
    """Drum pitches changed between `midi.source` and `notes.augmented`; else drum notes off the GM kit that
    one shift maps back onto it, at the first notes stage where it shows.

    The kit rule judges `midi.source` always (nothing before it to compare with); the later stages only
    when the source-against-augmented comparison could not be made. An augmentation draws its shift per
    example, so each example is judged on its own as well as the batch as a whole."""
    if symbolic_tokens(trace) is None and all(notes_of(trace, s) is None for s in NOTES_STAGES[:2]):
        return []
    found = _kit_rule(trace, NOTES_STAGES[:1])
    if found:
        return found
    compared, found = _compared(trace)
    if compared:
        return found
    return _kit_rule(trace, NOTES_STAGES[1:])
