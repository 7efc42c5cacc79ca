"""Symbolic token sequences read as the tokenizer writes them: bars, positions inside the bar, each
Pitch followed by its attributes, pad/bos/eos where they belong; and sequences or windows without a note."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.vocab import NOTE_EVENT_TYPES, positions_per_bar, walk
from ..trace import Trace
from ._symbolic import NOTES_STAGES, batch_size, meta_list, notes_of, symbolic_tokens
from .base import make

__all__ = ["judge_structure", "judge_empty"]

CHECK = "checks.symbolic"

#: attributes a tokenizer may write for some programs only (miditok: `use_note_duration_programs`)
PER_PROGRAM = frozenset({"Duration"})

#: problem -> (token type responsible, what is wrong, what to look at)
PROBLEMS: dict[str, tuple[str, str, str]] = {
    "out_of_range": ("id", "ids outside the vocabulary", "the ids were made with a larger vocabulary, or a special id "
                     "(-100, -1) was written into the tokens"),
    "no_bar": ("Bar", "no Bar token in a sequence longer than two bars while the vocabulary has Bar tokens",
               "the Bar tokens were filtered out (a token-type filter, a vocabulary cut) or never written"),
    "position_past_bar": ("Position", "Position at or past the bar's length",
                          "the bar length used to encode differs from the time signature in force "
                          "(beat = the denominator's note in miditok 3) or the TimeSig tokens were dropped"),
    "missing_attributes": ("Pitch", "Pitch not followed by its attributes",
                           "the tokens were reordered, cut or filtered; or read with another vocabulary"),
    "pad_inside": ("PAD", "pad ids inside a sequence (a non-pad after a pad)",
                   "sequences were concatenated after padding, or the pad id is an id the tokenizer also uses"),
    "bos_misplaced": ("BOS", "BOS not at the start", "add BOS once, before padding and before any crop"),
    "eos_misplaced": ("EOS", "EOS not the last non-pad id, or repeated",
                      "add EOS once, after the crop, before padding"),
}


def _not_judged(reason: str, **evidence: Any) -> Finding:
    return make("symbolic.not_judged", "info", "tokens", f"symbolic tokens not judged per id: {reason}", CHECK,
                hint="the symbolic structure checks read a flat REMI/TSD vocabulary ([B, T] ids, one "
                     "'Type_Value' string per id)", **evidence)


def judge_structure(trace: Trace) -> list[Finding]:
    """Every sequence must read as the tokenizer writes: bars, positions within the bar, note attributes, specials."""
    tok = symbolic_tokens(trace)
    if tok is None:
        return []
    if tok.vocab is None:
        return [_not_judged("the tap's meta holds no flat vocabulary (one list of 'Type_Value' strings)",
                            tokenizer=tok.meta.get("tokenizer"))]
    if tok.ids.ndim != 2:
        return [_not_judged(f"ids of shape {list(tok.ids.shape)} (several streams per step, as Octuple)",
                            tokenizer=tok.meta.get("tokenizer"))]
    vocab, res = tok.vocab, tok.vocab.resolution
    rows: dict[str, list[int]] = {k: [] for k in PROBLEMS}
    counts: dict[str, int] = dict.fromkeys(PROBLEMS, 0)
    detail: dict[str, Any] = {}
    attrs = vocab.attributes()
    written = _attributes_written(tok.ids, vocab, attrs)
    for b, ids in enumerate(tok.ids):
        ts = (4, 4)  # miditok's bar before any TimeSig token (and always, without them)
        ev = walk(ids, vocab, ts)
        missing = [m for m in ev.missing_attributes if m[0] < ev.length - len(attrs)  # a crop may cut the last note
                   and (m[1] not in PER_PROGRAM or (_program_at(ids, vocab, m[0]), m[1]) in written)]
        no_bar = vocab.has("Bar") and ev.bars == 0 and ev.pitch_tokens > 0 and (
            ev.position_backwards > 0 or ev.length > 2 * positions_per_bar(ts, res))
        found = {"out_of_range": len(ev.out_of_range), "no_bar": int(no_bar),
                 "position_past_bar": len(ev.positions_past_bar), "missing_attributes": len(missing),
                 "pad_inside": len(ev.pads_inside), "bos_misplaced": len(ev.bos_misplaced),
                 "eos_misplaced": len(ev.eos_misplaced)}
        for k, c in found.items():
            if c:
                rows[k].append(b)
                counts[k] += c
        if ev.positions_past_bar and "position_past_bar" not in detail:
            i, p, per_bar = ev.positions_past_bar[0]
            detail["position_past_bar"] = {"example": b, "index": i, "position": p, "positions_per_bar": per_bar}
        if ev.out_of_range and "out_of_range" not in detail:
            bad = ids[ev.out_of_range]
            detail["out_of_range"] = {"example": b, "min": int(bad.min()), "max": int(bad.max()),
                                      "vocabulary": len(vocab)}
        if missing and "missing_attributes" not in detail:
            detail["missing_attributes"] = {"example": b, "index": missing[0][0], "expected": missing[0][1]}
    found = [k for k in PROBLEMS if rows[k]]
    if not found:
        return []
    top = found[0]
    parts = "; ".join(f"{PROBLEMS[k][1]}: {counts[k]} in examples {rows[k][:8]}" for k in found)
    return [make("symbolic.structure", "error", "tokens", f"symbolic tokens are malformed: {parts}", CHECK,
                 hint=PROBLEMS[top][2], token_type=PROBLEMS[top][0], problem=top, problems=found,
                 counts={k: counts[k] for k in found}, examples={k: rows[k] for k in found}, detail=detail,
                 vocabulary=len(vocab), resolution=res)]


def _program_at(ids: np.ndarray, vocab: Any, i: int) -> str | None:
    """The value of the last Program token before index i (None without one)."""
    for j in range(i - 1, -1, -1):
        t = int(ids[j])
        if 0 <= t < len(vocab) and vocab.types[t] == "Program":
            return vocab.values[t]
        if 0 <= t < len(vocab) and vocab.types[t] == "Bar":
            break
    return None


def _attributes_written(ids: np.ndarray, vocab: Any, attrs: tuple[str, ...]) -> set[tuple[str | None, str]]:
    """(program, attribute type) pairs that follow some Pitch of that program in the batch.

    A tokenizer may leave Duration out for some programs by design (miditok's
    `use_note_duration_programs`, often without drums): a Pitch lacking it is malformed only where the
    same program carries it elsewhere in the batch. Velocity has no such switch: it is always judged."""
    out: set[tuple[str | None, str]] = set()
    note_types = set(NOTE_EVENT_TYPES)
    for row in np.asarray(ids):
        types = [vocab.types[int(t)] if 0 <= int(t) < len(vocab) else "" for t in row]
        for i, typ in enumerate(types):
            if typ in note_types:
                program = _program_at(row, vocab, i)
                out.update((program, t) for t in types[i + 1 : i + 1 + len(attrs)] if t in attrs)
    return out


def _empty_token_rows(trace: Trace) -> list[int] | None:
    tok = symbolic_tokens(trace)
    if tok is None or tok.vocab is None or tok.ids.ndim != 2:
        return None
    pitch_ids = np.concatenate([tok.vocab.ids(t) for t in NOTE_EVENT_TYPES])
    return [int(b) for b in np.flatnonzero(~np.isin(tok.ids, pitch_ids).any(axis=1))]


def judge_empty(trace: Trace) -> list[Finding]:
    """A sequence with no note event, or a window (crop) of a notes stage with no note: at the earliest stage."""
    tok_rows = _empty_token_rows(trace)
    if tok_rows is None:
        return []
    tables = {s: notes_of(trace, s) for s in NOTES_STAGES}
    n = batch_size(trace, *(t[0] for t in tables.values() if t is not None))
    empty: dict[str, list[int]] = {}
    for stage in ("midi.source", "notes.augmented"):
        got = tables[stage]
        if got is not None:
            present = set(got[0][:, 0].astype(int).tolist())
            empty[stage] = [e for e in range(n) if e not in present]
    empty["tokens"] = tok_rows
    visible = {s: rows for s, rows in empty.items() if rows}
    if not visible:
        return []
    stage = next(iter(visible))  # dict order is pipeline order: the earliest stage where it shows
    rows = visible[stage]
    files = meta_list(tables["midi.source"][1] if tables["midi.source"] else {}, "files", n)
    where = "a sequence with no note event (no Pitch token)" if stage == "tokens" else \
        f"a window of {stage} with no note"
    hint = ("the crop landed between notes (a rest, a pickup, the end of a piece): draw windows where the piece "
            "has notes, or skip empty windows" if stage != "tokens" else
            "the notes were lost before or during tokenization (a track filter, a pitch range, an empty crop): "
            "compare the example's notes with its tokens")
    return [make("symbolic.empty", "error", stage, f"{len(rows)} of {n} examples hold {where}: examples {rows[:8]}",
                 CHECK, hint=hint, examples=rows, by_stage=visible, files=[files[i] for i in rows[:8]])]
