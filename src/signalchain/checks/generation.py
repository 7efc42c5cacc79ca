"""Judge repetition: is it the sampler (generation side) or what the model learned (training side)?

Generation side, from the configured run on a fresh model (broad predictions, so any narrowing of
the picks is the sampler's): greedy picks, a low effective temperature, truncation (top-k/top-p),
guidance far above the usual range, a prefix that fills the output, a stop that never fires.
Training side, from the data and the model: crops too short to hold a phrase, examples that are
all alike, examples that loop on a few sounds, no position signal, generated copies of examples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..findings import Finding
from ..records.generation import (
    DataVariety,
    GenerationMeasurement,
    GenerationRun,
    NearestExample,
    PositionProbe,
    StopProbe,
)
from ..records.symbolic import EosProbe
from .base import make

__all__ = ["judge_sampler", "judge_stop", "judge_eos", "judge_training", "judge_memorised", "verdict",
           "GENERATION_SIDE", "TRAINING_SIDE"]

CHECK = "checks.generation"
MIN_PICKS = 50  # fewer sampled tokens than this say nothing about the sampler
MIN_SUPPORT = 0.05  # share of the vocabulary a sampler's logits must leave possible
LOW_TEMPERATURE = 0.5
HIGH_GUIDANCE = 10.0  # MusicGen samples with 3; token models are rarely guided beyond 5-7
PREFIX_SHARE = 0.5
NO_EOS_SURPRISE = 1e-3  # faithful sampling would have emitted EOS with probability above 1 - this
SHORT_CROP_S = 1.0  # under a second no phrase, barely two beats, fits a training window
# Narrow data, judged against the pipeline's own data (an absolute profile correlation is not: all real
# music shares a spectral tilt, so its profiles correlate highly whatever the set):
NARROW_GAP = 0.25  # training profiles correlate this much more than the validation split's do
ALIKE_RATIO = 1.5  # examples differ from each other less than 1.5x the two halves of one example do
LOOP_ENTROPY = 1.5  # nats: a median example cycling through ~4 coarse sounds
COPY_SIMILARITY = 0.9
GENERATION_SIDE = ("generation.greedy", "generation.low_temperature", "generation.restrictive_sampling",
                   "generation.dominant_prefix", "generation.excessive_guidance", "generation.no_stop")
TRAINING_SIDE = ("generation.repetitive", "generation.memorised", "loader.repeats", "split.duplicate")


def _reset(report: GenerationMeasurement, key: str) -> GenerationRun | None:
    return next((r for r in report.runs if r.label.startswith(f"{key} = ") and r.error is None), None)


def judge_sampler(report: GenerationMeasurement) -> list[Finding]:
    """Greedy, low temperature, truncation, guidance and a dominant prefix, from the configured run."""
    run = report.run(report.configured)
    if run is not None and run.error is None and run.audio_only:
        loop = run.audio_loop
        heard = (f"; on the audio, spectral frames are {loop['self_similarity']:.2f} self-similar with the strongest "
                 f"repeat at {loop['loop_seconds']:.2f} s (strength {loop['loop_strength']:.2f})") if loop else ""
        return [make("generation.codes_unavailable", "info", "generation",
                     f"generate returns {run.audio_only} and no token codes, so the token-level checks (greedy, "
                     "temperature, top-k/top-p, guidance, prompt share, stop condition) cannot judge it" + heard, CHECK,
                     hint="return the codes beside the audio (e.g. {'tokens': codes, 'audio': audio}), or call "
                          "tap('generation.tokens', codes) inside generate; tap('generation.logits', ...) too for the "
                          "sampler diagnosis", returned=run.audio_only, audio_loop=loop)]
    if run is None or run.error is not None or run.stats is None:
        return []
    out: list[Finding] = []
    fit, ev = run.fit, {"run": run.label, "frames": report.frames, "prompts": report.prompts}
    if run.reported:
        ev["reported_settings"] = run.reported
    if fit is not None and fit.n >= MIN_PICKS:
        ev.update(picks=fit.n, top1=fit.top1, top1_expected=fit.top1_expected, temperature=fit.temperature,
                  max_rank=fit.max_rank)
        if fit.top1 >= 0.99 and fit.top1_expected < 0.5:
            fix = _reset(report, "greedy")
            fixed = f"; with greedy=False the top token is picked {100 * fix.fit.top1:.0f}% of the time" \
                if fix is not None and fix.fit is not None and fix.fit.top1 < 0.99 else ""
            out.append(make("generation.greedy", "warning", "generation",
                            f"the sampler picked the most likely token at all {fit.n} steps, where sampling from the "
                            f"model's distribution picks it {100 * fit.top1_expected:.1f}% of the time{fixed}", CHECK,
                            hint="sample (use_sampling=True / greedy=False): argmax decoding of a music LM locks onto "
                                 f"a loop after a few {'bars' if report.symbolic else 'frames'}", **ev))
            return out + _guidance_and_prefix(report, run)
        beyond = max(fit.beyond_rank_expected or 0.0, fit.beyond_mass_expected or 0.0)
        truncated = beyond >= max(20.0, 0.05 * fit.n)
        if fit.support < MIN_SUPPORT:  # a processor before the tap already cut the candidates
            truncated = True
            out.append(make("generation.restrictive_sampling", "warning", "generation",
                            f"the logits the sampler picks from leave {100 * fit.support:.1f}% of the vocabulary "
                            "possible (the rest lies over 50 nats below the best token)", CHECK,
                            hint="a logits processor (top-k/top-p filter, a mask) removes nearly every candidate "
                                 "before sampling; widen it", support=fit.support, **ev))
        elif truncated:
            cures = [
                k
                for k in ("top_k", "top_p")
                if (r := _reset(report, k)) is not None
                and r.fit is not None
                and max(r.fit.beyond_rank_expected or 0.0, r.fit.beyond_mass_expected or 0.0)
                < max(20.0, 0.05 * r.fit.n)
            ]
            cure = f"; resetting {' or '.join(cures)} removes the cut" if cures else ""
            out.append(
                make(
                    "generation.restrictive_sampling",
                    "warning",
                    "generation",
                    f"no pick lay beyond rank {fit.max_rank} (or beyond {100 * (fit.max_mass_before or 0):.0f}% "
                    f"of the probability mass) in {fit.n} picks, where the model's distribution would have put "
                    f"{beyond:.0f} picks there{cure}",
                    CHECK,
                    hint=(f"top-k or top-p keeps too few candidates of the {run.cardinality or 'whole'}-token "
                          "vocabulary: sample with top_k=0 (or a large share of the vocabulary) and top_p 0.9-0.95"
                          if report.symbolic else "top-k or top-p keeps too few candidates: MusicGen samples with "
                          "top_k=250, top_p=0") + " (top_p is the mass to keep, e.g. 0.9, not the mass to drop)",
                    beyond_expected=beyond,
                    max_mass_before=fit.max_mass_before,
                    cures=cures,
                    **ev,
                )
            )
        tau = fit.temperature
        if tau is not None and tau < LOW_TEMPERATURE and (not truncated or tau < 0.15):
            fix = _reset(report, "temperature")
            fixed = f"; with temperature=1 the fit gives {fix.fit.temperature:.2f}" \
                if fix is not None and fix.fit is not None and fix.fit.temperature else ""
            out.append(make("generation.low_temperature", "warning", "generation",
                            f"the picks fit a sampling temperature of {tau:.3g}: the top token is picked "
                            f"{100 * fit.top1:.0f}% of the time where the model's distribution says "
                            f"{100 * fit.top1_expected:.1f}%{fixed}", CHECK,
                            hint="sample at temperature ≈ 1 (MusicGen's default); a low temperature is greedy "
                                 "decoding in all but name and loops", **ev))
    elif fit is None and report.seed_agreement is not None and report.seed_agreement >= 0.999 and run.stats.frames > 4:
        out.append(make("generation.greedy", "warning", "generation",
                        "two seeds give token-for-token the same output: the sampler does not sample", CHECK,
                        hint="check use_sampling/greedy and the temperature; tap `generation.logits` (the logits the "
                             "sampler picks from) for a finer diagnosis", seed_agreement=report.seed_agreement, **ev))
        return out
    return out + _guidance_and_prefix(report, run)


def _guidance_and_prefix(report: GenerationMeasurement, run: GenerationRun) -> list[Finding]:
    out: list[Finding] = []
    c = run.guidance
    if c is not None and c > HIGH_GUIDANCE:
        off = _reset(report, "cfg_coef")
        effect = ""
        if off is not None and off.fit is not None and run.fit is not None:
            effect = (f"; its picks have {run.fit.surprisal:.2f} nats of surprisal against "
                      f"{off.fit.surprisal:.2f} without guidance")
        out.append(make("generation.excessive_guidance", "warning", "generation",
                        f"the sampler's logits are uncond + {c:.3g} × (cond − uncond): classifier-free guidance "
                        f"{c / 3.0:.0f}× MusicGen's 3{effect}", CHECK,
                        hint="use cfg_coef ≈ 3 for a token LM; large coefficients over-sharpen towards a few tokens "
                             "and repeat them", guidance=c))
    share = run.sampled_share
    if share is None and run.prompt_frames is not None and run.frames_generated:
        share = 1.0 - run.prompt_frames / run.frames_generated
    if share is None and report.leading_agreement is not None and (report.seed_agreement or 0) < 0.999:
        share = 1.0 - report.leading_agreement  # frames both seeds share from the start were not sampled
    if share is not None and share < PREFIX_SHARE:
        step = "token" if report.symbolic else "frame"
        loop = run.stats.loop_strength if run.stats is not None else None
        out.append(make("generation.dominant_prefix", "warning", "generation",
                        f"only {100 * share:.0f}% of the output was sampled: the rest is a prefix given to the model"
                        + (f" (the output repeats itself at a {run.stats.loop_period}-{step} period on "
                           f"{100 * loop:.0f}% of {step}s)" if loop else ""), CHECK,
                        hint="keep the prompt to a small share of the output (" + (
                            "a bar or two of the piece" if report.symbolic else "AudioCraft continuations use a few "
                            "seconds of a 30 s piece") + ") and check how its length is computed",
                        sampled_share=share, prompt_frames=run.prompt_frames, loop_strength=loop))
    return out


def judge_stop(probe: StopProbe | None) -> list[Finding]:
    """A stop condition given a pattern the model produces at a known frame must end generation there."""
    if probe is None or probe.error is not None or (probe.stopped is None and probe.frames_generated is None):
        return []
    ran = probe.frames_generated if probe.frames_generated is not None else probe.frames
    if probe.stopped or ran <= probe.pattern_frame + probe.stop_after + 1 or not probe.continued:
        return []
    return [make("generation.no_stop", "warning", "generation",
                 f"told to stop after {probe.stop_after} frame of a pattern the model produced at frame "
                 f"{probe.pattern_frame}, generation ran on to frame {ran} of {probe.frames}", CHECK,
                 hint="the stop condition never fires: check the units of its length (frames, not samples) and "
                      "the codes it compares with", pattern_frame=probe.pattern_frame, frames_generated=ran)]


def judge_eos(probe: EosProbe | None) -> list[Finding]:
    """A symbolic sampler that cannot emit EOS: over a run as long as the golden sequences (which end in
    EOS), no row stopped, and the logits it picked from gave EOS probability exactly 0 at every step (a
    mask), or gave it enough mass that faithful sampling emits EOS with probability over 1 - 1e-3.

    A model that merely rarely predicts EOS (any fresh model) gives it a small, non-zero probability and
    no surprise at a run without it: silent."""
    e = probe.stats if probe is not None and probe.error is None else None
    if e is None or e.emitted or not e.steps:
        return []
    golden = sorted(probe.golden_eos_positions)
    ran = probe.frames_generated if probe.frames_generated is not None else e.length
    ended = sum(g < ran for g in golden)
    data = (f"; {ended} of {len(golden)} golden sequences have ended by then (EOS at {golden[0]}-{golden[-1]})"
            if golden else "")
    model = (f"; the model itself gives EOS {100 * probe.model_eos_probability:.2g}% where a golden sequence ends "
             "(teacher-forced)" if probe.model_eos_probability is not None else "")
    ev = {"eos_id": e.eos_id, "rows": e.rows, "steps": e.steps, "zero_steps": e.zero_steps, "limit": probe.limit,
          "frames_generated": ran, "golden_eos_positions": golden, "model_eos_probability": probe.model_eos_probability,
          "max_probability": e.max_probability, "expected": e.expected}
    if e.zero_steps == e.steps and (not golden or 2 * ended >= len(golden)):
        return [make("generation.no_stop", "warning", "generation",
                     f"the sampler gives EOS (id {e.eos_id}) probability exactly 0 at all {e.steps} steps it sampled "
                     f"({e.rows} rows, {ran} tokens each, none stopped){data}{model}: generation can never stop", CHECK,
                     hint="something between the model and the pick masks EOS: look for a special-token mask or a "
                          "vocabulary slice that covers its id (`logits[:, :n_special] = -inf` meant for PAD and BOS "
                          "only, an off-by-one `[:, :-1]`), or a minimum length longer than the pieces",
                     **ev)]
    if e.log_p_none is not None and e.log_p_none < math.log(NO_EOS_SURPRISE):
        return [make("generation.no_stop", "warning", "generation",
                     f"the logits the sampler picked from give EOS (id {e.eos_id}) {e.expected:.1f} expected picks "
                     f"over "
                     f"{e.steps} steps (faithful sampling emits none with probability {math.exp(e.log_p_none):.1e}), "
                     f"and no row of {e.rows} picked it{data}", CHECK,
                     hint="EOS is dropped after the tapped logits: a top-k/top-p cut or a vocabulary slice off by one "
                          "that never keeps EOS's id",
                     log_p_none=e.log_p_none, **ev)]
    return []


def judge_training(data: DataVariety | None, position: PositionProbe | None) -> list[Finding]:
    """Training-side causes: short windows, alike examples, looping examples, no position signal."""
    out: list[Finding] = []
    if position is not None:
        for look in position.lookups:
            if look["constant"] and look["length"] >= 8 and look["rows"] >= look["length"]:
                out.append(make("generation.repetitive", "warning", "model",
                                f"embedding table {look['module']!r} ({look['rows']} rows) is looked up with one and "
                                f"the same row at all {look['length']} steps: the model gets no signal of where it "
                                "is in the sequence and can only learn local loops", CHECK,
                                hint="check how positions are computed (offset + arange(S)); with absolute "
                                     "position embeddings every step must get its own row", **look))
                break
    if data is None:
        return out
    ev = {"examples": data.examples, "crop_seconds": data.crop_seconds}
    short = data.crop_seconds is not None and data.crop_seconds < SHORT_CROP_S
    if short:
        clip = float(np.median(data.clip_seconds)) if data.clip_seconds else None
        out.append(make("generation.repetitive", "warning", "crop",
                        f"training windows are {data.crop_seconds:.2f} s long"
                        + (f", {100 * data.crop_seconds / clip:.0f}% of a median clip of {clip:.1f} s" if clip else "")
                        + ": no phrase, barely a beat, fits in one, so the model learns note-to-note loops", CHECK,
                        hint="crop several seconds (MusicGen trains on 30 s); check the unit and decimal point of "
                             "the segment length", median_clip_seconds=clip, **ev))
    sim, vsim, ratio = data.profile_similarity, data.valid_profile_similarity, data.alike_ratio
    gap = sim - vsim if sim is not None and vsim is not None else None
    alike = ratio is not None and ratio < ALIKE_RATIO
    if (gap is not None and gap > NARROW_GAP) or alike:
        why = []
        if gap is not None and gap > NARROW_GAP:
            why.append(f"their spectral profiles correlate {sim:.2f} on average against {vsim:.2f} for the "
                       "validation examples")
        if alike:
            why.append(f"two examples differ by only {ratio:.2f}x what the two halves of one example differ by")
        out.append(make("generation.repetitive", "warning", "loader",
                        f"the training examples are alike: {' and '.join(why)}; captions share "
                        f"{100 * (data.caption_overlap or 0):.0f}% of their words", CHECK,
                        hint="the training set is narrow (one instrument, one figure): a model fine-tuned on it "
                             "repeats what little it saw; widen the selection or check the query that built it",
                        profile_similarity=sim, valid_profile_similarity=vsim, alike_ratio=ratio,
                        caption_overlap=data.caption_overlap, **ev))
    if data.within_entropy and not short:
        med = float(np.median(data.within_entropy))
        low = float(np.mean(np.array(data.within_entropy) < LOOP_ENTROPY))
        if med < LOOP_ENTROPY:
            out.append(make("generation.repetitive", "warning", "loader",
                            f"the training examples loop on a few sounds: the median example's coarse tokens carry "
                            f"{med:.2f} nats (≈{np.exp(med):.1f} distinct sounds), {100 * low:.0f}% of examples are "
                            f"under {LOOP_ENTROPY} nats", CHECK,
                            hint="the data are dominated by short loops (ostinati, drones); a model trained on them "
                                 "mainly learns to repeat; rebalance the data", median_within_entropy=med,
                            low_share=low, **ev))
    return out


def judge_memorised(nearest: Sequence[NearestExample]) -> list[Finding]:
    copies = [n for n in nearest if n.similarity >= COPY_SIMILARITY
              and (n.audio_similarity_second is None or n.similarity - n.audio_similarity_second >= 0.05)]
    if not copies:
        return []
    top = max(copies, key=lambda n: n.similarity)
    return [make("generation.memorised", "warning", "generation",
                 f"generated sample {top.sample} matches training example {top.example!r} with spectral "
                 f"similarity {top.similarity:.2f} ({len(copies)} of {len(nearest)} samples are such copies)", CHECK,
                 hint="the model replays its training data: too few examples seen too often; listen to the pair "
                      "in the report", copies=[{"sample": n.sample, "example": n.example, "similarity": n.similarity}
                                               for n in copies])]


def verdict(report: GenerationMeasurement, findings: Sequence[Finding]) -> tuple[str, str]:
    """("generation" | "training" | "both" | "none", one paragraph with the evidence)."""
    gen = sorted({f.id for f in findings if f.id in GENERATION_SIDE and f.severity.value != "info"})
    train = sorted({f"{f.id} @ {f.stage}" for f in findings if f.id in TRAINING_SIDE and f.severity.value != "info"})
    side = "both" if gen and train else "generation" if gen else "training" if train else "none"
    parts = []
    configured = report.run(report.configured)
    if configured is not None and configured.error is not None:
        parts.append(f"the configured generation failed ({configured.error}), so the sampler was not examined")
    elif configured is not None and configured.audio_only:
        parts.append(f"generate returns {configured.audio_only} without codes, so the sampler was not examined")
    last = report.checkpoints[-1] if report.checkpoints else None
    if last is not None and last.teacher_forced_entropy is not None:
        fits = [r.fit for r in last.runs if r.fit is not None and r.fit.n]
        sampled = f", its configured picks carry {fits[0].surprisal:.2f} nats of surprisal" if fits else ""
        parts.append(f"after {last.step} updates the model predicts with {last.teacher_forced_entropy:.2f} nats of "
                     f"entropy teacher-forced{sampled}")
    if gen:
        parts.append("the sampler narrows the model's predictions: " + ", ".join(gen))
    if train:
        parts.append("the training side gives the model loops to learn: " + ", ".join(train))
    if side == "none":
        # Say only what was looked at: a side that was not examined is not a healthy side.
        examined = configured is not None and configured.error is None and not configured.audio_only
        data = report.data
        data_seen = data is not None and data.error is None and data.examples > 0
        seen = []
        if examined:
            seen.append("the sampler follows the model's distribution")
        if data_seen:
            seen.append(f"the {data.examples} training examples read show no repetition-prone pattern")  # type: ignore[union-attr]
        elif data is not None and data.error:
            seen.append(f"the training data could not be read ({data.error})")
        else:
            seen.append("the training data were not examined (no loader)")
        parts.append("; ".join(seen))
    text = {"generation": "GENERATION", "training": "TRAINING", "both": "TRAINING and GENERATION",
            "none": "no cause found"}[side] + ": " + "; ".join(parts) + "."
    return side, text
