"""Examples for the HF MusicGen pipeline: an audiofolder, an AudioCraft manifest, a folder of audio,
a `datasets.Dataset`, or a list of clips already in memory.

Every reader returns `Example`s (audio `[C, T]` float32 at its own rate, the caption, the row's
metadata, where it came from). Files are read through the audit's readers, so a manifest line that
the audit calls broken is skipped here with the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..._tensor import to_numpy
from ...audio.io import read_audio
from ...audit.sources import read_items, resolve_sources
from ...errors import UsageError
from ...findings import Finding
from ...records.audit import CAPTION_KEYS

__all__ = ["Batch", "Example", "read_examples", "examples_from_dataset", "examples_from_clips", "split_of"]


@dataclass
class Example:
    """One captioned clip."""

    audio: np.ndarray  # [C, T] float32
    sample_rate: int
    caption: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source_id: str | None = None
    path: str | None = None
    split: str = "train"


@dataclass
class Batch:
    """Examples trained together; `seed` seeds their crops and caption dropout."""

    examples: list[Example]
    seed: int

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def captions(self) -> list[str]:
        return [e.caption for e in self.examples]


def _caption(row: Mapping[str, Any], column: str | None) -> str:
    if column is not None:
        return "" if row.get(column) is None else str(row[column])
    for key in CAPTION_KEYS:
        if row.get(key) is not None:
            return str(row[key])
    return ""


def read_examples(paths: str | Path | Sequence[str | Path]) -> tuple[list[Example], list[Finding]]:
    """Examples of the datasets at `paths` (a manifest, an audiofolder, a folder; a folder of split
    folders gives one split each), and a finding for every line or file that could not be read."""
    raw = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    examples: list[Example] = []
    problems: list[Finding] = []
    for source in resolve_sources(raw):
        for item in read_items(source):
            if isinstance(item, Finding):
                problems.append(item)
                continue
            if item.path is None:
                continue
            try:
                audio = read_audio(item.path)
            except Exception as exc:  # one unreadable file is one finding; the others still load
                from ...checks.base import make

                problems.append(make("file.unreadable", "error", "dataset", str(exc), "integrations.hf_musicgen",
                                     hint="re-encode or drop this file", path=item.path))
                continue
            split = "valid" if source.split in ("validation", "val", "dev") else source.split
            examples.append(Example(audio.audio, audio.sample_rate, item.caption or "", {"caption": item.caption},
                                    item.source_id, item.path, "train" if split == "dataset" else split))
    if not examples:
        raise UsageError(f"no readable audio in {', '.join(raw)}"
                         + (f" ({len(problems)} problems, first: {problems[0].message})" if problems else ""))
    return examples, problems


def examples_from_dataset(dataset: Any, audio_column: str = "audio", caption_column: str | None = None,
                          split: str = "train") -> list[Example]:
    """Rows of a `datasets.Dataset` (or any sequence of mappings) with an HF `Audio` column
    (`{"array", "sampling_rate"}`) and a caption column (`description`, `caption`, `text`… by default)."""
    out: list[Example] = []
    if isinstance(dataset, Mapping) and all(hasattr(v, "__len__") for v in dataset.values()) and not _is_row(dataset):
        for name, part in dataset.items():  # a DatasetDict
            out += examples_from_dataset(part, audio_column, caption_column, str(name))
        return out
    for i, row in enumerate(dataset):
        audio = row.get(audio_column)
        if not isinstance(audio, Mapping) or "array" not in audio or "sampling_rate" not in audio:
            raise UsageError(
                f"row {i}: column {audio_column!r} is not an HF Audio value ({{'array', 'sampling_rate'}}); "
                f"columns: {sorted(row)}"
            )
        array = np.asarray(to_numpy(audio["array"]), dtype=np.float32)
        array = array[None] if array.ndim == 1 else array
        meta = {k: v for k, v in row.items() if k != audio_column and isinstance(v, (str, int, float, bool))}
        out.append(Example(array, int(audio["sampling_rate"]), _caption(row, caption_column), meta,
                           str(row.get("source_id")) if row.get("source_id") is not None else None,
                           audio.get("path"), "valid" if split in ("validation", "val", "dev") else split))
    return out


def _is_row(obj: Mapping[str, Any]) -> bool:
    return not all(isinstance(v, Iterable) and not isinstance(v, (str, bytes, Mapping)) for v in obj.values())


def examples_from_clips(clips: Iterable[Any], split: str = "train") -> list[Example]:
    """Clip-like objects (`.audio`, `.sample_rate`, `.caption`, `.metadata`, `.source_id`)."""
    out = []
    for c in clips:
        get = c.get if isinstance(c, Mapping) else lambda k, d=None, c=c: getattr(c, k, d)
        out.append(Example(np.asarray(to_numpy(get("audio")), dtype=np.float32), int(get("sample_rate")),
                           str(get("caption") or ""), dict(get("metadata") or {}), get("source_id"), get("path"),
                           split))
    return out


def split_of(examples: Sequence[Example], names: Sequence[str]) -> list[Example]:
    return [e for e in examples if e.split in names]
