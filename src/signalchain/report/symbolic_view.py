"""Symbolic stages on the inspect page: a piano roll beside each caption and the player of its rendering.

Notes stages (`midi.source`, `notes.augmented`, `notes.decoded`, any tensor tapped with
`columns=NOTE_COLUMNS`) are drawn per example and heard through the rendering the golden keeps
(`golden/rendered.py`). Symbolic `tokens` are shown as their vocabulary's strings; the report cannot
decode them, so their piano roll is the pipeline's own decoding, the `notes.decoded` stage.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..golden.rendered import is_notes_stage, notes_examples
from ..golden.store import Golden
from ..symbolic.notes import COL, NOTE_COLUMNS, per_example
from ..trace import StageRecord, Trace
from .html import audio_player, esc, image_tag, table
from .pianoroll import piano_rolls_figure, program_label

__all__ = ["notes_records", "example_rolls_html", "symbolic_stage_html", "is_symbolic_tokens"]

_MAX_TOKENS_SHOWN = 160


def notes_records(trace: Trace) -> list[StageRecord]:
    return [r for r in trace if r.value is not None and is_notes_stage(r.kind, r.meta, r.shape)]


def is_symbolic_tokens(rec: StageRecord) -> bool:
    return rec.meta.get("kind") == "symbolic" and rec.kind == "tensor"


def _at(rec: StageRecord, key: str, i: int) -> Any:
    values = rec.meta.get(key)
    return values[i] if isinstance(values, list) and i < len(values) else None


def _examples(rec: StageRecord) -> list[np.ndarray]:
    return per_example(np.asarray(rec.value), notes_examples(np.asarray(rec.value), rec.meta))


def _tempo(rec: StageRecord, i: int) -> float | None:
    tempo = _at(rec, "tempos", i)
    return float(tempo) if isinstance(tempo, (int, float)) and not isinstance(tempo, bool) else None


def _meter(rec: StageRecord, i: int) -> tuple[Any, ...] | None:
    ts = _at(rec, "time_signatures", i)
    return tuple(ts) if isinstance(ts, list) else None


@functools.lru_cache(maxsize=32)
def _roll_png(panels: tuple[tuple[str, bytes], ...], ts: tuple[Any, ...] | None, title: str,
              tempo: float | None) -> bytes:
    """A page shows example 0 of a stage twice (its section and the tokens'): it is drawn once."""
    return piano_rolls_figure([(label, np.frombuffer(rows, np.float32).reshape(-1, len(NOTE_COLUMNS)))
                               for label, rows in panels], ts, title, tempo)


def _key(rows: np.ndarray) -> bytes:
    return np.ascontiguousarray(rows, dtype=np.float32).tobytes()


def _title(rec: StageRecord, i: int, what: str) -> str:
    name = _at(rec, "files", i)
    return what + (f" · {name}" if name else "")


def _roll(rec: StageRecord, rows: np.ndarray, i: int) -> str:
    png = _roll_png((("", _key(rows)),), _meter(rec, i), _title(rec, i, f"{rec.name} · example {i}"), _tempo(rec, i))
    return image_tag(png, f"piano roll of {rec.name} #{i}")


def _rolls(recs: list[StageRecord], tables: list[np.ndarray], i: int) -> str:
    """The notes stages of example i stacked on one beat axis (bars from the first stage's meter);
    a stage whose tempo or meter differs from the first's says so in its label."""
    first = recs[0]
    panels = []
    for rec, rows in zip(recs, tables):
        label = rec.name
        if (_tempo(rec, i), _meter(rec, i)) != (_tempo(first, i), _meter(first, i)):
            meter = "/".join(map(str, _meter(rec, i) or ())) or "no meter"
            label += f" ({meter}, {_tempo(rec, i) or '?'} bpm)"
        panels.append((label, _key(rows)))
    png = _roll_png(tuple(panels), _meter(first, i), _title(first, i, f"example {i}"), _tempo(first, i))
    return image_tag(png, f"piano roll of example {i}: {', '.join(r.name for r in recs)}")


def _player(golden: Golden, rec: StageRecord, i: int) -> str:
    r = golden.renderings.get(rec.name)
    audio = r.example(i) if r is not None else None
    if audio is None:
        return '<span class="muted">not rendered (captured without WAVs)</span>'
    return audio_player(audio, r.sample_rate, f"{rec.name} #{i} rendered") + \
        f'<div class="muted">rendered by {esc(r.renderer)}</div>'


def _describe(rows: np.ndarray) -> str:
    if not len(rows):
        return "no notes"
    drum = rows[:, COL["drum"]] > 0.5
    programs = sorted({int(p) for p in rows[~drum, COL["program"]]})
    span = float((rows[:, COL["onset"]] + rows[:, COL["duration"]]).max())
    parts = [f"{len(rows)} notes over {span:.2f} beats", ", ".join(program_label(p) for p in programs[:6])]
    if drum.any():
        parts.append(f"{int(drum.sum())} drum notes")
    return " · ".join(p for p in parts if p)


def example_rolls_html(golden: Golden, i: int) -> str:
    """For example i of the batch: its notes stages' piano rolls stacked, beside a player of each."""
    recs, tables = [], []
    for rec in notes_records(golden.trace):
        examples = _examples(rec)
        if i < len(examples):
            recs.append(rec)
            tables.append(examples[i])
    if not recs:
        return ""
    listen = "".join(f'<div><b>{esc(rec.name)}</b> <span class="muted">{esc(_describe(rows))}</span>'
                     f"<div>{_player(golden, rec, i)}</div></div>" for rec, rows in zip(recs, tables))
    return table([[_rolls(recs, tables, i), listen]], ["piano roll", "listen (rendered)"], raw=True)


def _notes_stage_body(golden: Golden, rec: StageRecord, max_examples: int) -> str:
    examples = _examples(rec)
    rows = []
    for i, ex in enumerate(examples[:max_examples]):
        ts = _at(rec, "time_signatures", i)
        rows.append([str(i), esc(_at(rec, "files", i) or "—"), esc(_at(rec, "tempos", i) or "—"),
                     esc("/".join(map(str, ts)) if isinstance(ts, list) else "—"), esc(_describe(ex)),
                     _player(golden, rec, i)])
    parts = [table(rows, ["#", "file", "tempo", "meter", "notes", "listen (rendered)"], raw=True)]
    if examples:
        parts.append(_roll(rec, examples[0], 0))
    return "".join(parts)


def _tokens_body(golden: Golden, rec: StageRecord) -> str:
    arr = np.asarray(rec.value)
    vocab = rec.meta.get("vocab") if isinstance(rec.meta.get("vocab"), list) else []
    parts = [f'<p class="muted">{esc(rec.meta.get("tokenizer") or "symbolic")} tokens, '
             f"{len(vocab)} in the vocabulary</p>"]
    if arr.ndim == 2 and arr.shape[0]:
        first = arr[0][:_MAX_TOKENS_SHOWN].tolist()
        words = [str(vocab[t]) if isinstance(t, int) and 0 <= t < len(vocab) else f"<{t}>" for t in first]
        more = f" … ({arr.shape[1] - len(first)} more)" if arr.shape[1] > len(first) else ""
        parts.append(f'<p>example 0: <span class="mono">{esc(" ".join(words) + more)}</span></p>')
    decoded = golden.trace.get("notes.decoded")
    if decoded is not None and decoded.value is not None and is_notes_stage(decoded.kind, decoded.meta,
                                                                               decoded.shape):
        examples = _examples(decoded)
        if examples:
            parts.append('<p class="muted">decoded by the pipeline\'s tokenizer (stage notes.decoded):</p>')
            parts.append(_roll(decoded, examples[0], 0) + _player(golden, decoded, 0))
    else:
        parts.append('<p class="muted">no notes.decoded stage: a report cannot decode tokens (tap the '
                     "pipeline's decoding as notes.decoded to see and hear them)</p>")
    return "".join(parts)


def symbolic_stage_html(golden: Golden, rec: StageRecord, max_examples: int) -> str | None:
    """The body of a notes or symbolic-tokens stage's section, or None for any other stage."""
    if rec.value is None:
        return None
    if is_notes_stage(rec.kind, rec.meta, rec.shape):
        return _notes_stage_body(golden, rec, max_examples)
    if is_symbolic_tokens(rec):
        return _tokens_body(golden, rec)
    return None
