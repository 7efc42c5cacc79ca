"""Judges of a MIDI dataset: each file (unreadable, missing, no notes) and the split (the same piece
on both sides: a duplicate, a transposed copy, another tempo or arrangement). Pure: evidence in,
findings out; one split finding per kind and pair of splits, naming both files of each pair with
the similarity and the shift or tempo ratio."""

from __future__ import annotations

from collections.abc import Sequence

from ..checks.base import make
from ..findings import Finding
from ..records.audit import STAGE_DATASET, Item
from .judge_splits import EXAMPLES, _by_split_pair, _pair_finding, eval_partner
from .leakage import Entry
from .midi_search import NoteMatch

__all__ = ["judge_piece", "judge_note_matches"]

CHECK = "audit.midi"


def _f(fid: str, severity: str, item: Item, message: str, hint: str, **evidence: object) -> Finding:
    return make(fid, severity, STAGE_DATASET, f"{item.where}: {message}", CHECK, hint=hint, path=item.ref,
                manifest=item.manifest, line=item.line, split=item.split, **evidence)


def judge_piece(item: Item, problem: str | None, notes: int) -> list[Finding]:
    """A file that is missing, not a file, not (a whole) MIDI file, or holds no notes."""
    if problem is None:
        if notes:
            return []
        return [_f("symbolic.empty", "warning", item, "the MIDI file holds no notes (it reads, but every track is "
                   "empty)", "drop it or re-export it with its notes; a tokenizer turns it into a sequence of "
                   "structure tokens only", notes=0)]
    kind, _, why = problem.partition(": ")
    if kind == "missing":
        return [_f("file.missing", "error", item, f"the MIDI file does not exist ({why or 'no such file'})",
                   "fix the path in the manifest (relative paths resolve against the manifest's folder) or drop "
                   "the line")]
    if kind == "not regular":
        return [_f("file.not_regular", "error", item, f"{why}, not a regular file: skipped without opening it",
                   "remove it or replace it with the MIDI file", kind=why)]
    return [_f("file.unreadable", "error", item, why or problem, "re-export or drop this file; a loader that hits "
               "it crashes, or a tokenizer skips it without saying so", problem=problem)]


def _signed(shift: int) -> str:
    return f"{shift:+d} semitone{'s' if abs(shift) != 1 else ''}"


def _how(m: NoteMatch) -> str:
    parts = []
    if m.shift:
        parts.append(_signed(m.shift))
    if abs(m.tempo_ratio - 1.0) > 0.005:
        parts.append(f"tempo ×{m.tempo_ratio:.3f}")
    if m.revoiced:
        parts.append("re-voiced")
    return ", ".join(parts) or "same notes"


_KINDS = {
    "duplicate": ("split.duplicate", "error", "have a copy (the same notes at the same tempo)",
                  "deduplicate by notes (not file bytes) before splitting, then keep each piece on one side"),
    "transposed": ("split.transposed_copy", "error", "have a transposed copy",
                   "group pieces by a key-invariant fingerprint before splitting; transpose as augmentation after "
                   "the split, inside the training set only"),
    "alternate": ("split.alternate_version", "warning", "are another version (another tempo or arrangement) of "
                  "pieces", "group the versions of a piece (fingerprint, or a work id) and keep each group in one "
                  "split"),
}


def judge_note_matches(entries: Sequence[Entry], matches: Sequence[NoteMatch]) -> list[Finding]:
    """The same piece across splits, one finding per kind and pair of splits."""
    out = []
    between_evals = eval_partner(entries)
    for kind, (fid, severity, what, hint) in _KINDS.items():
        best: dict[int, NoteMatch] = {}
        for m in sorted((m for m in matches if m.kind == kind),
                        key=lambda m: (m.a, between_evals(m), -m.agreement, -m.similarity)):
            best.setdefault(m.a, m)  # one partner per evaluation piece: its best
        ms = list(best.values())
        for idx in _by_split_pair([(m.a, m.b) for m in ms], entries).values():
            group = [ms[n] for n in idx]
            extra = [{"similarity": round(m.similarity, 3), "agreement": round(m.agreement, 3), "shift": m.shift,
                      "tempo_ratio": round(m.tempo_ratio, 4), "revoiced": m.revoiced} for m in group]
            f = _pair_finding(fid, severity, entries, [(m.a, m.b) for m in group], what, hint, extra)
            shown = "; ".join(f"{entries[m.a].where} ~ {entries[m.b].where} ({_how(m)}, similarity "
                              f"{m.similarity:.2f})" for m in group[:EXAMPLES])
            head = f.message[: f.message.index(f" in {entries[group[0].b].split}: ")]
            head += f" in {entries[group[0].b].split}"
            shifts = sorted({m.shift for m in group if m.shift})
            tail = f" (shifts {', '.join(f'{s:+d}' for s in shifts)})" if len(shifts) > 1 else ""
            if f.evidence.get("evaluation_only"):
                tail += f.message[f.message.rindex(" (both are evaluation splits"):]
            out.append(make(f.id, f.severity, f.stage, f"{head}: {shown}{tail}", f.check, hint=f.hint, **f.evidence))
    return out
