"""Symbolic token sequences read as the tokenizer writes them: bars, positions inside the bar, each
Pitch followed by its attributes, pad/bos/eos where they belong; and sequences or windows without a note."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..symbolic.vocab import NOTE_EVENT_TYPES, positions_per_bar, walk
from ..trace import Trace
from ..trace.layout import read_layout
from ._symbolic import NOTES_STAGES, batch_size, meta_list, notes_of, symbolic_tokens
from .base import make

__all__ = ["judge_structure", "judge_empty", "judge_eos_in_loss"]

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
    real = _real_positions(trace, tok.ids)
    for b, ids in enumerate(tok.ids):
        if real is not None:
            # Where the pipeline says a row is padding, the id there is padding whatever it is (a collator
            # that pads with EOS while the tap names the tokenizer's PAD): judge the real positions only.
            ids = ids[real[b]]
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


def _real_positions(trace: Trace, ids: np.ndarray) -> np.ndarray | None:
    """`mask.padding` [B, T] (True: a real position) when it is tapped with values in the ids' shape,
    marks a row's real positions as one run (a right- or left-padded row), and keeps a position in
    each row; else None."""
    if "mask.padding" not in trace:
        return None
    try:
        m = np.asarray(trace.value("mask.padding")).astype(bool)
    except Exception:  # tapped without values, or not an array
        return None
    if m.shape != ids.shape or not m.any(axis=1).all():
        return None
    for row in m:
        at = np.flatnonzero(row)
        if at[-1] - at[0] + 1 != at.size:
            return None  # holes inside a row: not a padding mask this check can read
    return m


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


def _rows_with_eos(ids: np.ndarray, real: np.ndarray | None, pad: int | None, eos: int) -> int:
    """Rows whose sequence holds its EOS: among its real positions (`mask.padding`), else among the
    non-pad ids, else (pad = EOS, no mask) where a trailing run of that id follows the sequence."""
    if real is not None:
        return int(sum(bool((row[m] == eos).any()) for row, m in zip(ids, real)))
    if pad is None or pad != eos:
        return int(sum(bool((row[row != pad] == eos).any()) for row in ids))
    return int(sum(1 for row in ids if row.size > 1 and row[-1] == eos and (row != eos).any()))


def judge_eos_in_loss(trace: Trace) -> list[Finding]:
    """The sequences hold their EOS, and the loss must count it somewhere: a model never trained to
    emit EOS never stops. The classic way to lose it: `pad_token_id = eos_token_id` with labels
    masked by value (`labels[labels == pad] = -100`), which masks every real EOS with the padding."""
    tok = symbolic_tokens(trace)
    if tok is None or tok.vocab is None or tok.ids.ndim != 2 or tok.vocab.eos_id is None:
        return []
    eos, pad = int(tok.vocab.eos_id), tok.vocab.pad_id
    rows = _rows_with_eos(tok.ids, _real_positions(trace, tok.ids), pad, eos)
    if rows < 2:
        return []  # windows cut before the end, or one sequence: nothing to count on
    view = read_layout(trace)
    if view.targets is None:
        return []
    counted = view.targets[view.mask] if view.mask is not None else view.targets[~view.ignored]
    kept = int((counted == eos).sum())
    if kept:
        return []
    same = pad is not None and int(pad) == eos
    return [make("targets.eos_masked", "error", "targets",
                 f"{rows} of {tok.ids.shape[0]} sequences end with EOS (id {eos}) but none of the {counted.size} "
                 f"targets the loss counts is EOS: the model is never trained to stop"
                 + (" (the pad id is the EOS id)" if same else ""), CHECK,
                 hint=("labels masked by value (`labels[labels == pad_token_id] = -100`) mask every EOS when pad "
                       "and EOS share an id: mask padding by position (the attention mask or the lengths), or give "
                       "padding its own id" if same else
                       "the EOS targets are masked or cut: keep the target that predicts each sequence's EOS in "
                       "the loss"),
                 eos_id=eos, pad_id=pad, sequences_with_eos=rows, eos_targets_counted=kept,
                 targets_counted=int(counted.size))]
