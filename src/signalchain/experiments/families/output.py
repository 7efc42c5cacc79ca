"""The output family: where the sound is lost between the tokens and the listener's ears."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...checks.base import make
from ...checks.output import judge_coverage, judge_decoder, judge_route
from ...findings import Finding
from ...pipeline import capabilities
from ...records.figures import Audio, Figure, Table, Text
from ...records.output import RouteMeasurement
from ...stats import as_batch_audio
from ...trace import Trace
from ..context import Context
from ..doctor import PRIOR, Family, Step, register
from ..output import measure_route, probe_decoder

__all__: list[str] = []

#: The route in order: the verdict names the first of these where something is wrong.
ROUTE = ("audio.original", "audio.resampled", "audio.mono", "crop", "audio.cropped", "tokens", "generation",
         "audio.decoded", "audio.written")
SOUND_IDS = ("audio.", "crop.", "tokens.", "generation.silent", "generation.invalid_tokens", "output.", "file.")


def _stage_rows(trace: Trace, label: str) -> list[list[Any]]:
    rows = []
    for rec in trace:
        audio = rec.summary.get("audio") if rec.kind == "audio" else None
        if not audio:
            continue
        ex = audio.get("examples", [])
        rows.append([f"{rec.name} ({label})", rec.meta.get("sample_rate") or "—", rec.meta.get("subtype") or "—",
                     f"{audio.get('rms_dbfs_min', -120):.1f} … {audio.get('rms_dbfs_max', -120):.1f}",
                     f"{audio.get('peak', 0):.3g}", f"{100 * audio.get('silence_fraction_max', 0):.0f}%",
                     f"{100 * audio.get('clipping_fraction_max', 0):.1f}%",
                     f"{100 * max((e.get('nonfinite_fraction', 0) for e in ex), default=0):.0f}%"])
    return rows


def _clips(trace: Trace, label: str) -> list[dict[str, Any]]:
    out = []
    for rec in trace:
        if rec.kind == "audio" and rec.value is not None and rec.sample_rate:
            x = as_batch_audio(np.asarray(rec.value, dtype=np.float32))[0]
            out.append({"label": f"{rec.name} ({label})", "audio": x, "rate": rec.sample_rate,
                        "note": f"{rec.sample_rate} Hz, example 0"})
    return out


def coverage(ctx: Context) -> dict[str, Any]:
    """What the family could look at: the golden step's audio stages, the decoder probe, the render's
    generated codes, decoded audio and written files; and why the rest could not be looked at."""
    caps = capabilities(ctx.pipeline)
    try:
        stages = [r.name for r in ctx.golden().trace if r.kind == "audio" and r.summary.get("audio")]
    except Exception:  # the golden step crashed: the doctor already said so
        stages = []
    probe = ctx.result("output.decoder")
    route = ctx.result(ROUTE_KEY)
    r = route[0] if route is not None else None
    files = [f for f in r.files if f.error is None] if r is not None else []
    decoded = bool(r is not None and r.decoded_dbfs)
    generated = bool(r is not None and (r.tokens_shape and r.tokens_shape[0] or r.audio_only))
    why = []
    if not stages:
        why.append("the training step taps no audio stage (audio.original … audio.decoded with a sample_rate=)")
    if probe is None or probe.far_share is None:
        why.append("the decoder was not probed (" + ("no `decode`" if "decode" not in caps else
                                                      "no [B, K, T] golden tokens long enough to decode")
                   + (f": {probe.error}" if probe is not None and probe.error else "") + ")")
    if r is None:
        why.append("no generated audio: the pipeline has no `render`, nor `generate` with `decode`")
    elif not files:
        why.append("no file was written and read back ("
                   + ("`render` wrote none" if "render" in caps else "the pipeline has no `render`: the route "
                      "ends at the decoded audio") + "), so the file's scale, header and rate were not checked")
    return {"stages": stages, "decoder": probe is not None and probe.far_share is not None, "generated": generated,
            "decoded": decoded, "files": len(files), "not_checked": why}


def _checked_text(cov: dict[str, Any]) -> str:
    parts = []
    if cov["stages"]:
        parts.append(f"the training step's audio ({', '.join(cov['stages'])})")
    if cov["decoder"]:
        parts.append("the decoder on golden tokens")
    if cov["generated"]:
        parts.append("a fresh model's generation" + (" decoded to audio" if cov["decoded"] else "")
                     + (f" and written to {cov['files']} file(s) read back as a player reads them"
                        if cov["files"] else ""))
    return "; ".join(parts)


def _verdict(findings: list[Finding], cov: dict[str, Any] | None = None) -> str:
    bad = [f for f in findings if f.stage in ROUTE and f.severity.value != "info" and f.id.startswith(SOUND_IDS)]
    if not bad:
        cov = cov or {"stages": [], "decoder": False, "generated": False, "decoded": False, "files": 0,
                      "not_checked": ["nothing was measured"]}
        checked, missing = _checked_text(cov), cov["not_checked"]
        if not checked:
            return "The output route could not be checked: " + "; ".join(missing) + "."
        return (f"No sound problem found in what could be checked: {checked}."
                + (f" Not checked: {'; '.join(missing)}." if missing else ""))
    first = min(bad, key=lambda f: ROUTE.index(f.stage or ""))
    later = sorted({f.stage for f in bad if f.stage != first.stage}, key=ROUTE.index)
    return (f"The sound first goes wrong at {first.stage}: {first.message}"
            + (f". Later stages also show problems ({', '.join(s for s in later if s)}), most likely downstream of it."
               if later else "."))


VERDICT = "Verdict on the output route"
ROUTE_KEY = "output.route"


def _slot(_: None) -> dict[str, Figure]:
    return {"output.verdict": Text(VERDICT, "")}  # first on the page; the text comes last


def _route(m: tuple[RouteMeasurement, Trace]) -> list[Finding]:
    return judge_route(m[0])


def route_failed(m: tuple[RouteMeasurement, Trace]) -> list[Finding]:
    route = m[0]
    if not route.error:
        return []
    return [make("output.route_failed", "info", None, f"the output route raised {route.error}",
                 "checks.output", hint="see the findings on the stages before it")]


def _with_golden(ctx: Context, m: tuple[RouteMeasurement, Trace]) -> tuple[Trace, Trace]:
    return ctx.golden().trace, m[1]


def _show_stages(traces: tuple[Trace, Trace]) -> dict[str, Figure]:
    golden, trace = traces
    out: dict[str, Figure] = {"output.stages": Table(
        "Audio at every stage of the route (golden step, then a fresh model's render)",
        ["stage", "rate", "subtype", "RMS dBFS (min … max)", "peak", "silent frames (max)", "clipped (max)",
         "non-finite"],
        _stage_rows(golden, "training step") + _stage_rows(trace, "render"))}
    clips = _clips(golden, "training step") + _clips(trace, "render")
    for rate in sorted({c["rate"] for c in clips}):
        out[f"output.listen_{rate}"] = Audio(f"Listen to every stage at {rate} Hz", rate,
                                             [{k: v for k, v in c.items() if k != "rate"} for c in clips
                                              if c["rate"] == rate])
    return out


def _verdict_text(ctx: Context, prior: list[Finding]) -> tuple[str, dict[str, Any]]:
    cov = coverage(ctx)
    return _verdict(prior, cov), cov


def _unchecked(said: tuple[str, dict[str, Any]]) -> list[Finding]:
    return judge_coverage(said[1])


def _show_verdict(said: tuple[str, dict[str, Any]]) -> dict[str, Figure]:
    return {"output.verdict": Text(VERDICT, said[0])}


register(Family("output", "The output route: generated tokens, decoder, scaling, the written file and its header",
                after=("generation",), steps=(
    Step("verdict_slot", show=_slot),
    Step("decoder", measure=probe_decoder, isolated=False, judges=(judge_decoder,)),
    Step("route", needs=("render|generate+decode",), needed_by="checks.output.route", measure=measure_route,
         isolated=False, judges=(_route,)),
    Step("stages", when=lambda ctx: ctx.result(ROUTE_KEY) is not None, measure=_with_golden, reads=(ROUTE_KEY,),
         timing="", isolated=False, show=_show_stages),
    Step("route_failed", reads=(ROUTE_KEY,), when=lambda ctx: ctx.result(ROUTE_KEY) is not None,
         judges=(route_failed,)),
    Step("verdict", measure=_verdict_text, reads=(PRIOR,), timing="", isolated=False, judges=(_unchecked,),
         show=_show_verdict),
)))
