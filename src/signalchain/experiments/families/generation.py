"""The generation family: where repetition comes from, training or generation, with the evidence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import signal

from ...checks.base import make, run_check
from ...checks.generation import judge_memorised, judge_sampler, judge_stop, judge_training, verdict
from ...findings import Finding, check_failed
from ...pipeline import missing_capability
from ...records.generation import GenerationMeasurement, GenerationRun
from ..context import Context
from ..doctor import family
from ..generation.measure import GenerationOutcome, measure_generation

__all__: list[str] = []


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _row(r: GenerationRun) -> list[Any]:
    s, f = r.stats, r.fit
    if r.error:
        return [r.label, r.error[:80]] + ["—"] * 10
    return [r.label, "audio only" if r.audio_only else "ok", _num(float(np.mean(s.entropy)) if s else None), _num(s.ngram_repetition if s else None),
            _num(s.longest_repeat if s else None), f"{s.loop_period} ({_num(s.loop_strength)})" if s else "—",
            _num(f.top1 if f else None), _num(f.top1_expected if f else None, ".3f"),
            _num(f.temperature if f else None), str(f.max_rank) if f else "—", _num(r.guidance),
            f"{_num(a['self_similarity'])} / {a['loop_seconds']:.2f} s ({_num(a['loop_strength'])})" if (a := r.audio_loop) else "—"]


def _resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    if sr_in == sr_out:
        return x
    g = math.gcd(sr_in, sr_out)
    return signal.resample_poly(x, sr_out // g, sr_in // g, axis=-1).astype(np.float32)


def _metrics(out: GenerationOutcome, side: str, text: str) -> dict[str, Any]:
    rep: GenerationMeasurement = out.report
    m: dict[str, Any] = {"generation.verdict": {"kind": "text", "title": "Verdict: where the repetition comes from",
                                                "text": text}}
    m["generation.runs"] = {"kind": "table", "title": f"Sampling settings on the same {rep.prompts} prompts, "
                            f"{rep.frames} frames (fresh model, then checkpoints)",
                            "headers": ["run", "status", "token entropy", "repeated 4-grams", "longest repeat",
                                        "loop period (strength)", "top-1 picks", "top-1 if faithful",
                                        "fitted temperature", "max rank", "guidance",
                                        "audio self-similarity / loop (strength)"],
                            "rows": [_row(r) for r in rep.runs] + [_row(r) for c in rep.checkpoints[1:] for r in c.runs]}
    if rep.checkpoints:
        steps = [c.step for c in rep.checkpoints]
        series = {"teacher-forced entropy": [steps, [c.teacher_forced_entropy or float("nan") for c in rep.checkpoints]]}
        for i, name in enumerate(("configured", "plain")):
            fits = [c.runs[i].fit if len(c.runs) > i else None for c in rep.checkpoints]
            series[f"surprisal of {name} picks"] = [steps, [f.surprisal if f else float("nan") for f in fits]]
        m["generation.checkpoints"] = {"kind": "curves", "title": "Teacher-forced predictions against free running",
                                       "series": series, "x_label": "update", "y_label": "nats"}
    if rep.data is not None:
        d = rep.data
        m["generation.data"] = {"kind": "table", "title": "What the training loader shows the model",
                                "headers": ["examples", "crop (s)", "median coarse-token entropy",
                                            "spectral profile similarity", "validation profile similarity",
                                            "examples vs halves of one (distance ratio)", "caption word overlap"],
                                "rows": [[d.examples, _num(d.crop_seconds),
                                          _num(float(np.median(d.within_entropy)) if d.within_entropy else None),
                                          _num(d.profile_similarity), _num(d.valid_profile_similarity),
                                          _num(d.alike_ratio), _num(d.caption_overlap)]]}
    if out.sample_rate and out.samples:
        m["generation.samples"] = {"kind": "audio", "title": "Generated samples per sampling setting (prompt 0)",
                                   "sample_rate": out.sample_rate,
                                   "clips": [{"label": k, "audio": v} for k, v in out.samples.items()]}
    if out.sample_rate and out.copies:
        label, sample, example, audio, sr = out.copies[0]
        near = max(rep.nearest, key=lambda n: n.similarity)
        verdict_ = "a suspected copy" if near.similarity >= 0.9 else "not a copy (a copy scores ≥ 0.9)"
        m["generation.nearest"] = {"kind": "audio", "title": f"Nearest training example beside the generated sample: "
                                   f"similarity {near.similarity:.2f}, {verdict_}",
                                   "sample_rate": out.sample_rate,
                                   "clips": [{"label": label, "audio": sample,
                                              "note": f"similarity {near.similarity:.2f}"},
                                             {"label": "nearest training example", "audio": _resample(audio, sr, out.sample_rate),
                                              "note": example}]}
    return m


@family("generation", "Repetition: sampler settings, stop condition, training data, positions, memorisation")
def generation_family(ctx: Context) -> list[Finding]:
    missing = missing_capability(ctx.pipeline, "generate", "checks.generation")
    if missing is not None:
        return [missing]
    with ctx.timed("generation.measure"):
        out = measure_generation(ctx)
    if out is None:
        return []
    rep = out.report
    found: list[Finding] = []
    found += run_check("checks.generation.sampler", judge_sampler, rep)
    found += run_check("checks.generation.stop", judge_stop, rep.stop)
    found += run_check("checks.generation.training", judge_training, rep.data, rep.position)
    found += run_check("checks.generation.memorised", judge_memorised, rep.nearest)
    try:
        side, text = verdict(rep, ctx.findings + found)
        found.append(make("generation.verdict", "info", None, text, "checks.generation", side=side))
        ctx.metrics.update(_metrics(out, side, text))
    except Exception as exc:  # the pictures never sink the findings
        found.append(check_failed("checks.generation.verdict", exc))
    return found
