"""Read MIDI datasets: the same sources as the audio audit (AudioCraft manifests, audiofolders, plain
folders, a folder of split folders, --split NAME=PATH) whose files are Standard MIDI Files.

    data/train/*.mid, data/test/*.mid     a folder of split folders (train/, valid/, test/ …)
    test/piece.mid                        a single file (--split NAME=FILE)
    egs/train/data.jsonl                  {"path": "piece.mid", ...} per line (metadata as for audio)

`is_midi_dataset` tells the `audit` command which audit a dataset needs: every source holds MIDI
files and no audio. `read_midi` turns one file into a notes table (symusic, imported here only) and
never lets a broken file end the run: it raises `MidiProblem` naming what is wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audio._files import check_path, display_path, list_files, read_regular
from ..findings import Finding
from ..records.audit import Item
from .sources import AUDIO_EXTENSIONS, Source, _listing_findings, _named, _split_name, read_items, resolve_sources

__all__ = ["MIDI_EXTENSIONS", "MIDI_LIMIT", "MidiProblem", "Piece", "is_midi_dataset", "read_midi",
           "read_midi_items", "resolve_midi_sources", "parse_midi"]

MIDI_EXTENSIONS = (".mid", ".midi", ".smf", ".kar")
MIDI_LIMIT = 64 << 20  # bytes: a MIDI file is kilobytes; past this it is not one
_PEEK = 20  # manifest lines looked at to tell MIDI from audio


class MidiProblem(Exception):
    """Why a file is not a readable MIDI file (`missing: …`, `not regular: …`, `unreadable: …`)."""


@dataclass
class Piece:
    """One MIDI file read: its notes table `[N, 7]` (beats) and first tempo (bpm)."""

    notes: np.ndarray
    tempo: float
    tracks: int


def _is_midi(path: str) -> bool:
    return path.lower().endswith(MIDI_EXTENSIONS)


def _source_is_midi(source: Source) -> bool:
    if source.kind == "folder":
        if list_files(source.path, AUDIO_EXTENSIONS).files:
            return False
        return bool(list_files(source.path, MIDI_EXTENSIONS).files)
    paths = [x.path for x in itertools.islice(read_items(source), _PEEK) if isinstance(x, Item) and x.path]
    return bool(paths) and all(_is_midi(p) for p in paths)


def resolve_midi_sources(paths: Sequence[str], splits: Sequence[tuple[str, str]] = ()) -> list[Source]:
    """As `sources.resolve_sources`, and a single MIDI file is a source of its own (kind "file")."""
    out: list[Source] = []
    for name, raw in splits:
        path = Path(raw)
        out += [Source(name, path, "file")] if _is_midi(raw) and path.is_file() else resolve_sources([], [(name, raw)])
    for raw in paths:
        path = Path(raw)
        out += [Source(_split_name(path, "dataset"), path, "file")] if _is_midi(raw) and path.is_file() \
            else resolve_sources([raw])
    return out


def is_midi_dataset(paths: Sequence[str], splits: Sequence[tuple[str, str]] = ()) -> bool:
    """Whether every source names MIDI files (and a folder holds no audio): the MIDI audit's input."""
    try:
        sources = resolve_midi_sources(paths, splits)
    except Exception:  # the audio audit names what is wrong with the paths
        return False
    return bool(sources) and all(s.kind == "file" or _source_is_midi(s) for s in sources)


def read_midi_items(source: Source) -> Iterator[Item | Finding]:
    """Every piece of one source, in order: a manifest's lines (as the audio audit reads them), or
    the MIDI files under a folder; a finding for each line or folder that cannot be read."""
    if source.kind == "file":
        yield _named(Item(split=source.split, ref=str(source.path), path=str(source.path)))
        return
    if source.kind != "folder":
        yield from read_items(source)
        return
    listing = list_files(source.path, MIDI_EXTENSIONS)
    yield from _listing_findings(source, listing)
    for path in listing.files:
        yield _named(Item(split=source.split, ref=path, path=path))


def read_midi(path: str) -> Piece:
    """The notes of the MIDI file at `path`; `MidiProblem` naming why it cannot be read."""
    state = check_path(path)
    if state.kind == "missing":
        raise MidiProblem(f"missing: {state.detail}")
    if not state.regular:
        raise MidiProblem(f"not regular: {state.detail}")
    try:
        data = read_regular(path, MIDI_LIMIT)
    except Exception as exc:
        raise MidiProblem(f"unreadable: {str(exc)[:200]}") from None
    return parse_midi(data, display_path(path))


def parse_midi(data: bytes, name: str = "the file") -> Piece:
    """The notes of Standard MIDI File bytes; `MidiProblem` for anything that is not a whole one."""
    import symusic  # imported here: only MIDI audits need it

    from ..symbolic.notes import from_score

    if not data:
        raise MidiProblem("unreadable: the file is empty (0 bytes), not a MIDI file")
    if data.startswith(b"RIFF") and data[8:12] == b"RMID":
        raise MidiProblem("unreadable: a RIFF MIDI (RMID) file; MIDI readers take the Standard MIDI File inside it "
                          "only once it is extracted")
    if not data.startswith(b"MThd"):
        head = data[:4].hex(" ")
        raise MidiProblem(f"unreadable: not a MIDI file (it starts with bytes {head}, not 'MThd')")
    try:
        score = symusic.Score.from_midi(data)
    except Exception as exc:  # symusic names what it hit: a truncated chunk, a bad header
        why = str(exc).replace("MiniMidi: ", "").replace(": iostream error", "")
        raise MidiProblem(f"unreadable: not a complete MIDI file ({why[:200]})") from None
    tempo = float(score.tempos[0].qpm) if len(score.tempos) else 120.0
    return Piece(notes=from_score(score), tempo=tempo, tracks=len(score.tracks))
