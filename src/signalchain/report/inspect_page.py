"""The `inspect` page: every stage of a golden batch in pipeline order, to read, see and hear.

Captions are printed beside the exact audio segment they condition, and tokens decoded back to audio
sit next to the audio they came from. Symbolic pipelines get a piano roll of each notes stage beside
the caption, with the player of its rendering (`symbolic_view.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..golden.store import Golden
from ..stats import as_batch_audio
from ..trace import StageRecord, Trace
from .describe import describe_record, fmt
from .html import HtmlReport, audio_player, esc, findings_table, image_tag, table
from .meta_tables import cell_text, mapping_table, records_table
from .plots import audio_figure, codes_figure, histogram_figure, mask_figure
from .symbolic_view import example_rolls_html, symbolic_stage_html

__all__ = ["render_inspect", "provenance_html", "stage_html"]

_MAX_EXAMPLES = 8
_META_HIDDEN = ("wav", "rendered")  # where the golden keeps its WAVs: shown as players, not as numbers


def provenance_html(prov: dict[str, Any]) -> str:
    git = prov.get("git") or {}
    rows = [
        ["pipeline", f"{prov.get('pipeline')} ({prov.get('pipeline_spec') or 'given object'})"],
        ["faults injected", ", ".join(prov.get("faults") or []) or "none"],
        ["seed", prov.get("seed")],
        ["created", prov.get("created")],
        ["code", f"{git.get('commit', 'not a git work tree')}{' (dirty)' if git.get('dirty') else ''}"],
        ["packages", ", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items())],
        ["device / dtype", f"{prov.get('device')} / {prov.get('dtype')}"],
        ["config hash", prov.get("config_hash") or "—"],
    ]
    return table(rows, ["", ""])


def _examples(trace: Trace) -> int:
    for name in ("caption", "audio.cropped", "audio.original", "tokens"):
        rec = trace.get(name)
        if rec is not None and rec.shape:
            return int(rec.shape[0])
    return 0


def _audio_of(rec: StageRecord | None, i: int) -> str:
    if rec is None or rec.value is None or not rec.sample_rate:
        return '<span class="muted">—</span>'
    batch = as_batch_audio(rec.value)
    if i >= batch.shape[0]:
        return '<span class="muted">—</span>'
    return audio_player(batch[i], rec.sample_rate, f"{rec.name} #{i}")


def _examples_html(trace: Trace, golden: Golden | None = None) -> str:
    """One card per example: the caption, its metadata, crop, players for each audio stage, and the
    piano roll and rendering of each notes stage."""
    n = min(_examples(trace), _MAX_EXAMPLES)
    captions = trace.get("caption")
    meta = trace.get("metadata")
    crop = trace.get("crop")
    heard = trace.get("audio.cropped") or next((r for r in trace if r.kind == "audio"), None)
    decoded = trace.get("audio.decoded")
    original = trace.get("audio.original")
    dropped = trace.get("condition.dropped")
    cards = []
    for i in range(n):
        cap = (
            captions.value[i]
            if captions is not None and captions.value is not None and i < len(captions.value)
            else None
        )
        lines = [
            f'<div class="caption">“{esc(cap)}”</div>'
            if cap is not None
            else '<div class="muted">no caption stage</div>'
        ]
        if (
            meta is not None
            and isinstance(meta.value, list)
            and i < len(meta.value)
            and isinstance(meta.value[i], dict)
        ):
            m = meta.value[i]
            keys = [k for k in ("source_id", "instrument", "key", "bpm", "genre", "moods") if k in m]
            lines.append('<div class="muted">' + " · ".join(f"{k}: {esc(cell_text(m[k]))}" for k in keys) + "</div>")
        if crop is not None and crop.value is not None and i < len(crop.value):
            lo, hi = (int(v) for v in np.asarray(crop.value[i]).ravel()[:2])
            sr = crop.meta.get("sample_rate")
            secs = f" = {lo / sr:.2f}–{hi / sr:.2f} s" if sr else ""
            lines.append(f'<div class="muted">crop samples {lo}–{hi}{secs}</div>')
        if (
            dropped is not None
            and dropped.value is not None
            and i < len(dropped.value)
            and bool(np.asarray(dropped.value[i]))
        ):
            lines.append('<div class="warning">condition dropped for this example (classifier-free dropout)</div>')
        players = []
        if heard is not None:
            players.append(f"<div>heard by the model ({esc(heard.name)}): {_audio_of(heard, i)}</div>")
        if decoded is not None:
            players.append(f"<div>tokens decoded ({esc(decoded.name)}): {_audio_of(decoded, i)}</div>")
        if original is not None and original is not heard:
            players.append(f"<div>source ({esc(original.name)}): {_audio_of(original, i)}</div>")
        rolls = example_rolls_html(golden, i) if golden is not None else ""
        cards.append(f'<div class="example"><b>example {i}</b>{"".join(lines)}{"".join(players)}{rolls}</div>')
    return "".join(cards) or '<p class="muted">No per-example stages.</p>'


def _shown_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in _META_HIDDEN}


#: What true and false mean where the stage's name settles it (DESIGN §2); other masks say only 1 and 0.
_MASK_MEANINGS = {"mask.loss": ("counted in the loss", "not counted"),
                  "condition.dropped": ("condition dropped", "condition kept")}


def _mask_png(name: str, arr: np.ndarray) -> bytes:
    """A boolean stage's picture with its axes named: a [B] vector is one cell per example (the batch
    axis); otherwise example 0 is drawn, [T] or [K, T] (codebooks over frames), or text positions for
    the condition stages."""
    meanings = _MASK_MEANINGS.get(name, ("", ""))
    if arr.ndim == 1:
        return mask_figure(arr, f"{name} · every example", "example (batch axis)", "", meanings)
    along = "text token" if name.startswith("condition.") else "frame"
    rows = "codebook" if arr.ndim == 3 else ""
    return mask_figure(arr[0], f"{name} · example 0", along, rows, meanings)


def stage_html(rec: StageRecord, max_examples: int = _MAX_EXAMPLES, golden: Golden | None = None) -> str:
    """Statistics, and a picture and players where the kind has them."""
    parts = [f'<p class="mono">{esc(rec.kind)} · {esc(rec.dtype)} · shape {esc(rec.shape)} · {esc(rec.device)}</p>',
             f"<p>{esc(describe_record(rec))}</p>"]
    meta = _shown_meta(rec.meta)
    if meta:
        parts.append(f'<details open><summary class="muted">meta</summary>{mapping_table(meta)}</details>')
    v = rec.value
    if v is None:
        parts.append('<p class="muted">value not kept</p>')
        return "".join(parts)
    symbolic = symbolic_stage_html(golden, rec, max_examples) if golden is not None else None
    if symbolic is not None:
        return "".join(parts) + symbolic
    if rec.kind == "audio":
        batch = as_batch_audio(v)
        rows = []
        for i in range(min(batch.shape[0], max_examples)):
            ex = (
                rec.summary.get("audio", {}).get("examples", [{}])[i]
                if i < len(rec.summary.get("audio", {}).get("examples", []))
                else {}
            )
            rows.append([str(i), fmt(ex.get("rms_dbfs"), 3), fmt(ex.get("peak"), 3), fmt(ex.get("dc"), 3),
                         fmt(ex.get("silence_fraction"), 3), fmt(ex.get("clipping_fraction"), 3),
                         fmt(ex.get("channel_correlation"), 3), fmt(ex.get("mono_energy_db"), 3),
                         _audio_of(rec, i)])
        parts.append(
            table(
                rows, ["#", "RMS dBFS", "peak", "DC", "silent", "clipped", "ch corr", "mono/ch dB", "listen"], raw=True
            )
        )
        parts.append(image_tag(audio_figure(batch[0], rec.sample_rate, f"{rec.name} · example 0"), rec.name))
    elif rec.kind == "text":
        parts.append(table([[str(i), esc(t)] for i, t in enumerate(v)], ["#", "text"], raw=True))
    elif rec.kind == "json":
        parts.append(records_table(v if isinstance(v, list) else [v], max_examples))
    elif rec.kind == "scalar":
        parts.append(f"<p><b>{esc(fmt(v, 8))}</b></p>")
    else:
        arr = np.asarray(v)
        if arr.dtype == np.bool_ and arr.ndim >= 1:
            parts.append(image_tag(_mask_png(rec.name, arr), rec.name))
        elif np.issubdtype(arr.dtype, np.integer) and arr.ndim == 3:
            parts.append(
                image_tag(codes_figure(arr[0], f"{rec.name} · example 0", rec.meta.get("cardinality")), rec.name)
            )
        elif np.issubdtype(arr.dtype, np.integer) and arr.ndim <= 2 and arr.size <= 256:
            parts.append(f'<pre class="mono">{esc(np.array2string(arr, threshold=256))}</pre>')
        elif arr.size > 1:
            parts.append(image_tag(histogram_figure(arr, f"{rec.name} · value histogram"), rec.name))
    return "".join(parts)


def render_inspect(golden: Golden) -> HtmlReport:
    trace = golden.trace
    prov = golden.provenance
    report = HtmlReport(f"signalchain inspect · {prov.get('pipeline') or 'pipeline'}",
                        f"golden batch {golden.path} · {len(trace)} stages",
                        findings=trace.problems,
                        judged="inspect runs no checks: these count the problems met while recording")
    report.section("Provenance", provenance_html(prov), "provenance")
    if trace.problems:
        report.section("Recording problems", findings_table(trace.problems), "problems")
    overview = [[str(r.order), f'<a href="#stage-{esc(r.name)}">{esc(r.name)}</a>', esc(r.kind),
                 esc("×".join(map(str, r.shape)) or "—"), esc(describe_record(r))] for r in trace]
    report.section(
        "Stages in pipeline order", table(overview, ["#", "stage", "kind", "shape", "summary"], raw=True), "stages"
    )
    report.section("Examples: each caption beside the audio it conditions", _examples_html(trace, golden), "examples")
    for rec in trace:
        report.section(f"{rec.order} · {rec.name}", stage_html(rec, golden=golden), f"stage-{rec.name}")
    return report
