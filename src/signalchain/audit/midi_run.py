"""`run_midi_audit`: the dataset audit on MIDI files (`signalchain audit` on a folder or manifest of
.mid files).

    read sources ──> items ──> read each file (symusic) ──> notes table ──> fingerprint ──> judge it
    all pieces ──> captions across the dataset ──> splits: ids, copies (hash), transposed, tempo-changed
                   and re-voiced copies (faiss search + note comparison), versions by title

Nothing an input does stops the run: a file that is missing, not MIDI, truncated or empty is one
finding naming it, and the others are audited. MIDI files are small and fast to read: one process
reads them; `workers` is the search's thread count.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..audio._files import display_path
from ..checks.base import make, run_check
from ..findings import Finding, check_failed, sort_findings
from ..records.audit import STAGE_DATASET, Item
from ..symbolic.fingerprint import SymbolicFingerprint, fingerprint_notes
from .judge_items import judge_captions, judge_item
from .judge_splits import judge_alternate_versions, judge_shared_ids
from .leakage import Entry, Match
from .midi_judge import judge_note_matches, judge_piece
from .midi_read import MidiProblem, read_midi, read_midi_items, resolve_midi_sources
from .midi_search import NoteMatch, find_note_matches
from .run import AuditResult, Progress, _cap
from .sources import Source

__all__ = ["run_midi_audit", "match_rows", "as_matches", "midi_summary_rows"]


def _read_sources(sources: Sequence[Source], findings: list[Finding]) -> list[Item]:
    items: list[Item] = []
    for source in sources:
        got: list[Item] = []
        try:
            for x in read_midi_items(source):
                (findings.append if isinstance(x, Finding) else got.append)(x)  # type: ignore[arg-type]
        except Exception as exc:  # a source broken in a way nobody foresaw: what was read counts
            findings.append(make("manifest.invalid", "error", STAGE_DATASET, f"{display_path(source.path)}: reading "
                                 f"stopped after {len(got)} pieces ({type(exc).__name__}: {str(exc)[:200]})",
                                 "audit.sources", hint="fix the source; the pieces read before the stop are audited",
                                 manifest=display_path(source.path)))
        items += got
    return items


def as_matches(matches: Sequence[NoteMatch]) -> list[Match]:
    """The note matches as the audio judges' `Match`es (to leave copies out of title-based versions)."""
    return [Match(m.a, m.b, m.kind, m.similarity) for m in matches]


def match_rows(entries: Sequence[Entry], matches: Sequence[NoteMatch]) -> list[dict[str, Any]]:
    """The matches as report rows (the audio audit's columns, plus shift and tempo ratio)."""
    return [{"kind": m.kind, "a": entries[m.a].ref, "a_split": entries[m.a].split, "b": entries[m.b].ref,
             "b_split": entries[m.b].split, "similarity": round(m.similarity, 4), "coverage": round(m.agreement, 3),
             "overlap_s": 0.0, "lag_s": 0.0, "shift": m.shift, "tempo_ratio": round(m.tempo_ratio, 4),
             "revoiced": m.revoiced} for m in matches]


def run_midi_audit(paths: Sequence[str] = (), splits: Sequence[tuple[str, str]] = (), *, workers: int = 1,
                   max_caption_tokens: int | None = None, progress: Progress | None = None) -> AuditResult:
    """Audit the MIDI datasets at `paths` and the named `splits` (NAME, PATH); see the module docstring."""
    t0 = time.perf_counter()
    progress = progress or Progress()
    sources = resolve_midi_sources(paths, splits)
    findings: list[Finding] = []
    items = _read_sources(sources, findings)
    progress.start(len(items))
    progress.say(f"reading {len(items)} MIDI files")
    entries: list[Entry] = []
    fps: list[SymbolicFingerprint] = []
    files: list[dict[str, Any]] = []
    captions: list[tuple[Item, str]] = []
    for item in items:
        problem, fp, tracks = None, None, 0
        try:
            piece = read_midi(item.path or "")
            fp, tracks = fingerprint_notes(piece.notes, piece.tempo), piece.tracks
        except MidiProblem as exc:
            problem = str(exc)
        except Exception as exc:  # a file nobody foresaw: its finding, not the run's end
            problem = f"unreadable: {type(exc).__name__}: {str(exc)[:200]}"
        findings += run_check("audit.midi", judge_piece, item, problem, fp.notes if fp else 0)
        findings += run_check("audit.items", judge_item, item, None, max_caption_tokens)  # names, captions
        files.append({"path": item.ref, "split": item.split, "line": item.line, "problem": problem,
                      "notes": fp.notes if fp else None, "tempo": round(fp.tempo, 2) if fp else None,
                      "tracks": tracks if fp else None, "seconds": None, "caption": item.caption})
        progress.advance(1)
        if fp is None:
            continue
        captions.append((item, fp.exact))
        entries.append(Entry(item.split, item.ref, item.where, fp.exact, silent=fp.empty, source_id=item.source_id,
                             title=item.title, artist=item.artist))
        fps.append(fp)
    t1 = time.perf_counter()
    findings += run_check("audit.captions", judge_captions, captions)
    progress.say("searching for the same piece across splits")
    try:
        matches, search = find_note_matches(entries, fps, threads=max(1, workers), progress=progress.say)
    except Exception as exc:  # the search failing is one finding; the per-file results stand
        findings.append(check_failed("audit.midi_search", exc))
        matches, search = [], {}
    findings += run_check("audit.shared_ids", judge_shared_ids, entries)
    findings += run_check("audit.midi_matches", judge_note_matches, entries, matches)
    findings += run_check("audit.alternate_versions", judge_alternate_versions, entries, as_matches(matches))
    counts = Counter(i.split for i in items)
    readable = Counter(e.split for e in entries)
    notes: Counter[str] = Counter()
    for e, fp in zip(entries, fps):
        notes[e.split] += fp.notes
    return AuditResult(
        findings=sort_findings(_cap(findings)),
        sources=[{"split": s.split, "path": display_path(s.path), "kind": s.kind} for s in sources],
        splits={s: {"items": counts[s], "clips": float(readable[s]), "notes": float(notes[s]), "samples": 0.0,
                    "mean": 0.0, "std": 0.0} for s in counts},
        files=files,
        matches=match_rows(entries, matches),
        search=search,
        cache={"path": "none (MIDI files are read directly)", "hits": 0, "measured": len(items)},
        timings={"read": t1 - t0, "search": time.perf_counter() - t1, "total": time.perf_counter() - t0},
    )


def midi_summary_rows(result: AuditResult) -> list[list[str]]:
    """split, pieces, readable, notes: the CLI's table."""
    return [[name, str(s["items"]), str(int(s["clips"])), str(int(s["notes"]))] for name, s in result.splits.items()]

