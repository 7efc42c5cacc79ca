"""Notes stages heard: each notes table of a golden batch rendered to one WAV, for listening.

A stage whose tap says `columns=NOTE_COLUMNS` (`midi.source`, `notes.augmented`, `notes.decoded`, or
any other) holds notes, not sound. `save_golden` renders its examples (the first
MAX_RENDERED_EXAMPLES; `symbolic.render`: FluidSynth with a GM soundfont, or the additive
fallback), lays them end to end with short gaps in `audio/<stage>.wav` (mono, 16-bit), and records
in the stage's meta `rendered`: the file, where each example lies in it, its rate and the renderer.
The file is listed in the manifest with its sha256 like every other. A rendering is not the
stage's value: nothing compares it (a soundfont or FluidSynth version changes it), so the loader
checks that it is a readable WAV whose examples lie where the manifest says, not how it sounds.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ..errors import GoldenFileError
from ..symbolic.notes import COL, NOTE_COLUMNS, per_example
from ..symbolic.render import RENDER_RATE, render_examples
from .schema import Manifest, StageEntry

__all__ = ["Rendering", "RENDER_GAP_SECONDS", "MAX_RENDERED_EXAMPLES", "is_notes_stage", "notes_examples",
           "render_stage", "check_rendered_entry", "load_renderings"]

RENDER_GAP_SECONDS = 0.25
#: Examples rendered per notes stage (a golden batch is small; a page shows 8): a large batch costs
#: seconds, not minutes, of FluidSynth at capture.
MAX_RENDERED_EXAMPLES = 16
_EMPTY = "nothing to render (no notes)"


@dataclass
class Rendering:
    """A notes stage's examples as sound: `audio` `[C, S]` with example i at `segments[i]`."""

    audio: np.ndarray
    sample_rate: int
    segments: list[list[int]]
    renderer: str

    def example(self, i: int) -> np.ndarray | None:
        if not 0 <= i < len(self.segments):
            return None
        lo, hi = self.segments[i]
        return self.audio[:, lo:hi]


def is_notes_stage(kind: str, meta: dict[str, Any] | Any, shape: list[int] | tuple[int, ...]) -> bool:
    """A tensor `[N, 7]` tapped with `columns=NOTE_COLUMNS`."""
    columns = meta.get("columns") if isinstance(meta, dict) else getattr(meta, "columns", None)
    return (kind == "tensor" and isinstance(columns, (list, tuple)) and list(columns) == list(NOTE_COLUMNS)
            and len(shape) == 2 and shape[1] == len(NOTE_COLUMNS))


def notes_examples(table: np.ndarray, meta: dict[str, Any]) -> int:
    """How many examples a notes stage holds: its per-example meta lists say, else its rows do."""
    for key in ("tempos", "time_signatures", "files"):
        if isinstance(meta.get(key), list):
            return len(meta[key])
    ex = np.asarray(table, dtype=np.float64).reshape(-1, len(NOTE_COLUMNS))[:, COL["example"]]
    ex = ex[np.isfinite(ex) & (ex >= 0) & (ex < 1 << 20)]
    return int(ex.max()) + 1 if len(ex) else 0


def _at(meta: dict[str, Any], key: str, i: int, default: Any) -> Any:
    values = meta.get(key)
    return values[i] if isinstance(values, list) and i < len(values) and values[i] is not None else default


def _tempo(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 120.0


def _signature(value: Any) -> tuple[int, int]:
    ok = (isinstance(value, (list, tuple)) and len(value) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 1 <= v <= 64 for v in value))
    return (int(value[0]), int(value[1])) if ok else (4, 4)


def render_stage(table: np.ndarray, meta: dict[str, Any], cache: dict[bytes, tuple[np.ndarray, str]],
                 sample_rate: int = RENDER_RATE) -> Rendering:
    """Every example of a notes stage rendered (mono, in one FluidSynth run) and laid end to end;
    `cache` spares rendering twice what two stages share (a decoded table equal to its source)."""
    examples = per_example(table, min(notes_examples(table, meta), MAX_RENDERED_EXAMPLES))
    wanted = [(rows, _tempo(_at(meta, "tempos", i, 120.0)), _signature(_at(meta, "time_signatures", i, (4, 4))))
              for i, rows in enumerate(examples)]
    keys = [np.ascontiguousarray(rows).tobytes() + np.array([tempo, *ts, sample_rate], np.float64).tobytes()
            for rows, tempo, ts in wanted]
    if any(k not in cache for k in keys):
        for key, (audio, name) in zip(keys, render_examples(wanted, sample_rate)):
            cache[key] = (audio.mean(axis=0, dtype=np.float32)[None] if audio.size else np.zeros((1, 0), np.float32),
                          name)
    gap = int(round(RENDER_GAP_SECONDS * sample_rate))
    parts, segments, names, at = [], [], [], 0
    for i, key in enumerate(keys):
        mono, name = cache[key]
        if i:
            parts.append(np.zeros((1, gap), np.float32))
            at += gap
        parts.append(mono)
        segments.append([at, at + mono.shape[1]])
        at += mono.shape[1]
        if name != _EMPTY and name not in names:
            names.append(name)
    joined = np.concatenate(parts, axis=1) if parts else np.zeros((1, 0), np.float32)
    return Rendering(np.clip(joined, -1.0, 1.0), sample_rate, segments, "; ".join(names) or _EMPTY)


def check_rendered_entry(st: StageEntry, where: str, mpath: Path, seen: dict[str, str], wav_file: Any) -> str | None:
    """The manifest's claims about a stage's rendering: a file of audio/, a notes stage, ordered segments."""
    ref = st.meta.rendered
    if ref is None:
        return None
    rel = ref.path
    parts = rel.split("/")
    if len(parts) != 2 or parts[0] != "audio" or not wav_file.match(parts[1]):
        raise GoldenFileError(f"{mpath}: field {where}.meta.rendered.path: {rel!r} is not a file of the golden's "
                              "audio/ folder (expected audio/<name>.wav, no '..', no absolute path)")
    if not is_notes_stage(st.kind, st.meta.model_dump(), st.shape):
        raise GoldenFileError(f"{mpath}: field {where}.meta.rendered: stage {st.name!r} is not a notes table "
                              f"(a tensor [N, {len(NOTE_COLUMNS)}] tapped with columns={list(NOTE_COLUMNS)}), "
                              "and only notes stages are rendered")
    if rel in seen:
        raise GoldenFileError(f"{mpath}: field {where}.meta.rendered.path: {rel!r} is also the WAV of stage "
                              f"{seen[rel]!r}")
    last = 0
    for lo, hi in ref.segments:
        if not last <= lo <= hi:
            raise GoldenFileError(f"{mpath}: field {where}.meta.rendered.segments: [{lo}, {hi}] is not an "
                                  "interval after the one before it")
        last = hi
    seen[rel] = st.name
    return rel


def load_renderings(m: Manifest, arrays: dict[str, np.ndarray], contents: dict[str, bytes],
                    folder: Path) -> dict[str, Rendering]:
    """Each notes stage's rendering, decoded from the bytes whose sha256 was checked: one segment per
    example, all inside the file, at the manifest's rate."""
    out: dict[str, Rendering] = {}
    for i, st in enumerate(m.stages):
        ref = st.meta.rendered
        if ref is None:
            continue
        wpath = folder / ref.path
        n = min(notes_examples(arrays[st.name], st.meta.model_dump()), MAX_RENDERED_EXAMPLES)
        if len(ref.segments) != n:
            raise GoldenFileError(f"{folder / 'manifest.json'}: field stages[{i}].meta.rendered.segments: "
                                  f"{len(ref.segments)} segments for the {n} examples of stage {st.name!r} "
                                  f"(at most {MAX_RENDERED_EXAMPLES} are rendered)")
        try:
            with sf.SoundFile(io.BytesIO(contents[ref.path])) as f:
                rate, frames = f.samplerate, f.frames
                audio = f.read(dtype="float32", always_2d=True).T
        except Exception as exc:  # libsndfile's errors, whatever their type
            raise GoldenFileError(f"{wpath}: is not a readable WAV ({type(exc).__name__}: {str(exc)[:120]})") from None
        if rate != ref.sample_rate or (ref.segments and ref.segments[-1][1] > frames):
            raise GoldenFileError(f"{wpath}: holds {frames} frames at {rate} Hz, not the rendering of stage "
                                  f"{st.name!r} the manifest describes ({ref.sample_rate} Hz, examples up to "
                                  f"frame {ref.segments[-1][1] if ref.segments else 0})")
        out[st.name] = Rendering(np.ascontiguousarray(audio), rate, [list(s) for s in ref.segments], ref.renderer)
    return out
