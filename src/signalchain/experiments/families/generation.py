"""The generation family: where repetition comes from, training or generation, with the evidence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...audio.resample import resample
from ...checks.base import make
from ...checks.generation import judge_eos, judge_memorised, judge_sampler, judge_stop, judge_training, verdict
from ...checks.symbolic_repetition import judge_note_repetition
from ...findings import Finding
from ...records.figures import Audio, Curves, Figure, Table, Text
from ...records.generation import GenerationMeasurement, GenerationRun
from ..context import Context, Knob
from ..doctor import PRIOR, Family, Step, register
from ..generation.measure import GenerationOutcome, measure_generation
from ..generation.notes import measure_note_repetition

__all__: list[str] = []

KNOBS = {
    "gen_prompts": Knob(2, 2, 4, "prompts per generate call (generation and output families)"),
    "gen_frames": Knob(40, 50, 100, "frames per generated sample (generation and output families)"),
    "gen_train_steps": Knob(6, 12, 40, "updates of the short training whose checkpoints are compared"),
    "gen_data_batches": Knob(3, 4, 8, "loader batches measured for repetition-prone data"),
    "gen_sweep": Knob(False, True, True, "sweep sampling settings beyond the one-at-a-time resets"),
    "gen_examples": Knob(0, 0, 256, "training_examples() searched for a generated copy; 0: the loader's only (slow)"),
    "gen_symbolic_tokens": Knob(128, 256, 512, "symbolic tokens generated per prompt for note-level repetition"),
}


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _row(r: GenerationRun) -> list[Any]:
    s, f = r.stats, r.fit
    if r.error:
        return [r.label, r.error[:80]] + ["—"] * 10
    return [
        r.label,
        "audio only" if r.audio_only else "ok",
        _num(float(np.mean(s.entropy)) if s else None),
        _num(s.ngram_repetition if s else None),
        _num(s.longest_repeat if s else None),
        f"{s.loop_period} ({_num(s.loop_strength)})" if s else "—",
        _num(f.top1 if f else None),
        _num(f.top1_expected if f else None, ".3f"),
        _num(f.temperature if f else None),
        str(f.max_rank) if f else "—",
        _num(r.guidance),
        f"{_num(a['self_similarity'])} / {a['loop_seconds']:.2f} s ({_num(a['loop_strength'])})"
        if (a := r.audio_loop)
        else "—",
    ]


def _order(rep: GenerationMeasurement) -> Any:
    """Sort key of a sample's name: its run's row in the settings table."""
    rows = [r.label for r in rep.runs] + [r.label for c in rep.checkpoints[1:] for r in c.runs]

    def key(name: str) -> int:
        return next((i for i, label in enumerate(rows) if name.startswith(label + " (")), len(rows))

    return key


def _metrics(out: GenerationOutcome, side: str, text: str) -> dict[str, Figure]:
    rep: GenerationMeasurement = out.report
    m: dict[str, Figure] = {"generation.verdict": Text("Verdict: where the repetition comes from", text)}
    m["generation.runs"] = Table(f"Sampling settings on the same {rep.prompts} prompts, "
                            f"{rep.frames} {'tokens' if rep.symbolic else 'frames'} (fresh model, then checkpoints)",
                            ["run", "status", "token entropy", "repeated 4-grams", "longest repeat",
                                        "loop period (strength)", "top-1 picks", "top-1 if faithful",
                                        "fitted temperature", "max rank", "guidance",
                                        "audio self-similarity / loop (strength)"],
                            [_row(r) for r in rep.runs] + [_row(r) for c in rep.checkpoints[1:] for r in c.runs])
    if rep.checkpoints:
        steps = [c.step for c in rep.checkpoints]
        series = {
            "teacher-forced entropy": [steps, [c.teacher_forced_entropy or float("nan") for c in rep.checkpoints]]
        }
        for i, name in enumerate(("configured", "plain")):
            fits = [c.runs[i].fit if len(c.runs) > i else None for c in rep.checkpoints]
            series[f"surprisal of {name} picks"] = [steps, [f.surprisal if f else float("nan") for f in fits]]
        m["generation.checkpoints"] = Curves("Teacher-forced predictions against free running", series,
                                             x_label="update", y_label="nats")
    if rep.data is not None:
        d = rep.data
        m["generation.data"] = Table("What the training loader shows the model",
                                ["examples", "crop (s)", "median coarse-token entropy",
                                            "spectral profile similarity", "validation profile similarity",
                                            "examples vs halves of one (distance ratio)", "caption word overlap"],
                                [[d.examples, _num(d.crop_seconds),
                                          _num(float(np.median(d.within_entropy)) if d.within_entropy else None),
                                          _num(d.profile_similarity), _num(d.valid_profile_similarity),
                                          _num(d.alike_ratio), _num(d.caption_overlap)]])
    if out.sample_rate and out.samples:
        # one clip per run of the table, in its order; a run with nothing to play says why
        names = [*out.samples, *out.unheard]
        clips = [{"label": k, "audio": out.samples[k]} if k in out.samples else {"label": k, "note": out.unheard[k]}
                 for k in sorted(names, key=_order(rep))]
        m["generation.samples"] = Audio(f"Generated samples per sampling setting (prompt 0): {len(out.samples)} of "
                                        f"{len(names)} settings to hear", out.sample_rate, clips)
    if out.sample_rate and out.copies:
        label, sample, example, audio, sr = out.copies[0]
        near = max(rep.nearest, key=lambda n: n.similarity)
        verdict_ = "a suspected copy" if near.similarity >= 0.9 else "not a copy (a copy scores ≥ 0.9)"
        m["generation.nearest"] = Audio(
            f"Nearest training example beside the generated sample: similarity {near.similarity:.2f}, {verdict_}",
            out.sample_rate,
            [
                {"label": label, "audio": sample, "note": f"similarity {near.similarity:.2f}"},
                {
                    "label": "nearest training example",
                    "audio": resample(audio, sr, out.sample_rate, method="poly").astype(np.float32),
                    "note": example,
                },
            ],
        )
    return m


def _verdict(ctx: Context, out: GenerationOutcome, prior: list[Finding]) -> tuple[GenerationOutcome, str, str]:
    side, text = verdict(out.report, prior)
    return out, side, text


def generation_verdict(said: tuple[GenerationOutcome, str, str]) -> list[Finding]:
    _, side, text = said
    return [make("generation.verdict", "info", None, text, "checks.generation", side=side)]


def _show(said: tuple[GenerationOutcome, str, str]) -> dict[str, Figure]:
    return _metrics(*said)


def _stop(out: GenerationOutcome) -> list[Finding]:
    return judge_stop(out.report.stop) + judge_eos(out.report.eos)


def _training(out: GenerationOutcome) -> list[Finding]:
    return judge_training(out.report.data, out.report.position)


def _memorised(out: GenerationOutcome) -> list[Finding]:
    return judge_memorised(out.report.nearest)


def _sampler(out: GenerationOutcome) -> list[Finding]:
    return judge_sampler(out.report)


OUT = "generation.measure"

register(Family("generation", "Repetition: sampler settings, stop condition, training data, positions, memorisation",
                after=("conditioning",), needs=("generate",), needed_by="checks.generation", knobs=KNOBS, steps=(
    Step("measure", measure=measure_generation, isolated=False, judges=(_sampler, _stop, _training, _memorised)),
    # Symbolic pipelines only (decode_notes, [B, T] token ids): repetition heard in the notes.
    Step("notes", say="generation: repetition of decoded notes", measure=measure_note_repetition, reads=(OUT,),
         judges=(judge_note_repetition,)),
    # The pictures never sink the findings: a crash here is one finding, the judges' stay.
    Step("verdict", when=lambda ctx: ctx.result(OUT) is not None, measure=_verdict, reads=(OUT, PRIOR), timing="",
         judges=(generation_verdict,), show=_show),
)))
