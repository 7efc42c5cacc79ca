"""Repetition: trace the loop to training or to generation.

On a few golden prompts, at a few dozen frames (generating is the expensive part):
  1. the configured sampling (no override), twice (two seeds), and with each setting reset to its
     neutral value in turn — which reset changes the output, and how the sampler used its logits;
  2. (business and up) a sweep of temperature, top-k, top-p, guidance and prompt length;
  3. a stop-condition probe, a position probe of the model, the variety of the training data;
  4. a short training: teacher-forced entropy and free-running output at checkpoints, and the
     nearest training example of what the last checkpoint generates.
The sampler diagnosis uses a fresh model on purpose: its predictions are broad, so whatever narrows
the sampled tokens is the sampler's doing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..._tensor import as_float, to_numpy
from ...pipeline import as_step_output, capabilities
from ...records.generation import Checkpoint, GenerationMeasurement, GenerationRun
from ...stats import as_batch_audio
from ...trace import record, tap
from ...trace.layout import canonical_logits
from .._outputs import call_decode, read_generated
from .._seed import seed_everything
from ..context import Context
from ..optimisation._train import update_step
from .data import measure_data_variety, probe_positions
from .eos import eos_probe, symbolic_eos_id
from .memory import examples_from_pipeline, nearest_examples
from .metrics import logit_entropy
from .runs import NEUTRAL, codes_of, generate_once, stop_probe, take

__all__ = ["measure_generation", "GenerationOutcome"]


class GenerationOutcome:
    """The report plus what the report page plays: decoded samples per setting, nearest examples."""

    def __init__(self, report: GenerationMeasurement):
        self.report = report
        self.samples: dict[str, np.ndarray] = {}  # label -> decoded audio [C, T] of prompt 0
        self.unheard: dict[str, str] = {}  # label -> why that run has no audio to play
        self.sample_rate: int | None = None
        self.copies: list[tuple[str, np.ndarray, str, np.ndarray, int]] = []  # (label, sample, example, audio, sr)
        self.codes: dict[str, np.ndarray | None] = {}  # label -> the codes of that run [B, K, T]


def _golden_prompt(ctx: Context, rows: int, frames: int) -> torch.Tensor | None:
    """The first `frames` golden tokens of `rows` examples: a real prompt for the prompt-length sweep."""
    rec = ctx.golden().trace.get("tokens")
    if rec is None or rec.value is None or np.ndim(rec.value) != 3 or np.shape(rec.value)[-1] < frames:
        return None
    return torch.as_tensor(np.asarray(rec.value)[:rows, :, :frames]).long()


def _teacher_forced(ctx: Context, model: torch.nn.Module) -> tuple[float | None, float | None]:
    """Mean predicted entropy and loss on the golden batch, teacher-forced."""
    seed_everything(ctx.seed)
    with record(values={"logits", "mask.loss"}, stages={"logits", "mask.loss"}) as t, torch.no_grad():
        out = as_step_output(ctx.pipeline.step(model, ctx.batch(), tap))
    logits = t.value("logits") if "logits" in t else (to_numpy(out.logits) if out.logits is not None else None)
    if logits is None or np.ndim(logits) < 2:
        return None, None
    mask = np.asarray(t.value("mask.loss"), bool) if "mask.loss" in t else None
    if mask is not None and mask.ndim == 3 and mask.shape != np.shape(logits)[:-1]:
        # HF's [B*K, T', V] logits beside a [B, K, T'] loss mask: read them in the mask's layout
        canon = canonical_logits(np.asarray(logits), mask.shape[0], mask.shape[1])
        logits = canon if canon is not None else logits
    mask = mask if mask is not None and mask.shape == np.shape(logits)[:-1] else None
    loss = as_float(out.loss)
    return logit_entropy(np.asarray(logits), mask), loss if math.isfinite(loss) else None


def _decode(p: Any, codes: np.ndarray, model: Any = None) -> np.ndarray:
    return np.asarray(to_numpy(call_decode(p, torch.as_tensor(codes), model)), dtype=np.float32)


def _decode_row0(p: Any, codes: np.ndarray | None, model: Any = None) -> np.ndarray | None:
    if codes is None or "decode" not in capabilities(p):
        return None
    try:
        audio = _decode(p, codes[:1], model)
    except Exception:  # invalid codes: the output family reports that
        return None
    return audio.reshape(-1, audio.shape[-1])[:1] if audio.ndim >= 2 else audio[None]


class _Session:
    """One measurement session: the pipeline, the prompts, a model, and every run's codes by label."""

    def __init__(self, ctx: Context):
        self.ctx, self.p, self.b = ctx, ctx.pipeline, ctx.budget
        self.prompts = take(ctx.batch(), self.b.gen_prompts)
        self.frames, self.seed = self.b.gen_frames, ctx.seed
        tokens = ctx.golden().trace.get("tokens")
        self.frame_rate = tokens.meta.get("frame_rate") if tokens is not None else None
        self.eos_id = symbolic_eos_id(ctx)  # symbolic ids only: what each run does with EOS
        self.report = GenerationMeasurement(frames=self.frames, prompts=self.b.gen_prompts, frame_rate=self.frame_rate,
                                       runs=[], symbolic=tokens is not None and tokens.meta.get("kind") == "symbolic")
        self.out = GenerationOutcome(self.report)
        self.out.sample_rate = getattr(self.p, "sample_rate", None)
        self.model = ctx.fresh_model()
        self.codes: dict[str, np.ndarray | None] = self.out.codes
        self.audio: dict[str, np.ndarray] = {}  # label -> [B, C, S] where generate returned audio only
        self.batches: list[Any] = []  # the loader batches the data were measured on
        self.seen: list[Any] = []  # their crops, for the nearest-example search

    def run(self, label: str, overrides: dict[str, Any], seed: int | None = None) -> GenerationRun:
        r, trace, result = generate_once(self.p, self.model, self.prompts, label, overrides,
                                         self.seed if seed is None else seed, self.frames, self.frame_rate,
                                         eos_id=self.eos_id)
        t = trace.get("generation.tokens") if trace is not None else None
        # a tapped [B, T] (one token stream: symbolic ids) reads as [B, 1, T], like a returned one
        self.codes[label] = codes_of(t.value) if t is not None and t.value is not None else codes_of(result)
        if self.codes[label] is None:
            got = read_generated(result, self.out.sample_rate)
            if got.audio is not None:
                self.audio[label] = got.audio
                self.out.sample_rate = self.out.sample_rate or got.sample_rate
        return r

    def keep_sample(self, run: GenerationRun, name: str) -> None:
        """Prompt 0's audio of a run, for its player; or why it has none."""
        codes = self.codes.get(run.label)
        audio = _decode_row0(self.p, codes, self.model)
        if audio is None and run.label in self.audio:  # generate returned audio: play it as it came
            audio = self.audio[run.label][0].astype(np.float32)
        if audio is not None:
            self.out.samples[name] = audio
        elif run.error:
            self.out.unheard[name] = f"generation failed: {run.error}"
        elif codes is None:
            self.out.unheard[name] = "generate returned neither codes nor audio"
        elif "decode" not in capabilities(self.p):
            self.out.unheard[name] = "the pipeline has no decode(), so its codes cannot be heard"
        else:
            self.out.unheard[name] = "decode() failed on these codes (see the output family)"

    def sweep(self) -> None:
        """Configured (two seeds), each setting reset to neutral, plain sampling; more at business."""
        rep, runs = self.report, self.report.runs
        runs.append(self.run("configured", {}))
        runs.append(self.run("configured, next seed", {}, self.seed + 1))
        for key, neutral in NEUTRAL.items():
            runs.append(self.run(f"{key} = {neutral}", {key: neutral}))
        runs.append(self.run("plain sampling", dict(NEUTRAL)))
        a, b = self.codes.get("configured"), self.codes.get("configured, next seed")
        if a is not None and b is not None and a.shape == b.shape:
            rep.seed_agreement = float((a == b).mean())
            same = (a == b).all(axis=(0, 1))  # [T]: frames both seeds agree on, every row and codebook
            rep.leading_agreement = float(np.argmin(same) if not same.all() else len(same)) / max(len(same), 1)
        if self.b.gen_sweep:
            for label, extra in (("temperature 0.5", {"temperature": 0.5}), ("top_k 20", {"top_k": 20}),
                                 ("top_p 0.9", {"top_p": 0.9}), ("cfg_coef 3", {"cfg_coef": 3.0}),
                                 ("cfg_coef 10", {"cfg_coef": 10.0})):
                runs.append(self.run(label, {**NEUTRAL, **extra}))
            rows = len(self.prompts) if hasattr(self.prompts, "__len__") else 1
            for share in (0.25, 0.75):
                prompt = _golden_prompt(self.ctx, rows, int(share * self.frames))
                if prompt is not None:
                    runs.append(self.run(f"prompt {int(100 * share)}%", {**NEUTRAL, "prompt": prompt}))
        for r in runs:  # a player for every setting of the table
            self.keep_sample(r, f"{r.label} (fresh model)")

    def probes(self) -> None:
        self.report.stop = stop_probe(self.p, self.model, self.prompts, self.frames, self.seed)
        self.report.eos = eos_probe(self.ctx, self.model, self.prompts, self.report.run(self.report.configured),
                                    self.eos_id, self.frame_rate)
        self.report.position = probe_positions(self.ctx, self.model)
        self.report.data, self.seen = measure_data_variety(self.ctx, self.model, self.batches)

    def training(self) -> None:
        """A short training on the measured loader batches, in turn (their tokens are cached: encoding
        is the slow part), with teacher-forced entropy and free-running output at checkpoints."""
        rep, b = self.report, self.b
        entropy, loss = _teacher_forced(self.ctx, self.model)
        rep.checkpoints.append(
            Checkpoint(0, entropy, loss, [r for r in rep.runs if r.label in ("configured", "plain sampling")])
        )
        marks = sorted({max(1, b.gen_train_steps // 2), b.gen_train_steps}) if b.gen_train_steps > 0 else []
        marks = marks if b.gen_sweep else marks[-1:]
        if not marks:
            return
        optimizer = self.p.build_optimizer(self.model)
        batches = self.batches or [self.ctx.batch()]
        seed_everything(self.seed)
        for step in range(1, marks[-1] + 1):
            try:
                update_step(self.p, self.model, optimizer, batches[(step - 1) % len(batches)])
            except Exception as exc:  # the training itself fails: the other families say why
                rep.notes.append(f"the short training stopped at step {step}: {type(exc).__name__}: {exc}")
                break
            if step in marks:
                entropy, loss = _teacher_forced(self.ctx, self.model)
                runs = [self.run(f"step {step}: configured", {}), self.run(f"step {step}: plain", dict(NEUTRAL))]
                rep.checkpoints.append(Checkpoint(step, entropy, loss, runs))
        for c in rep.checkpoints[1:]:
            for r in c.runs:
                self.keep_sample(r, f"{r.label} (trained {c.step} steps)")

    def nearest(self) -> None:
        """The nearest training example to each sample the last checkpoint generates (plain sampling)."""
        p, rep, sr = self.p, self.report, self.out.sample_rate
        extra = examples_from_pipeline(p, self.b.gen_examples) \
            if self.b.gen_examples and "training_examples" in capabilities(p) else []
        last = rep.checkpoints[-1] if rep.checkpoints else None
        label = last.runs[-1].label if last is not None and last.runs else None
        plain = self.codes.get(label) if label is not None else None
        audio = self.audio.get(label) if label is not None else None
        decodes = "decode" in capabilities(p)
        if (plain is None and audio is None) or not sr or (plain is not None and not decodes):
            return
        try:
            # The examples as the model knows them: their tokens through the same decoder (a perfect
            # copy then matches exactly, whatever the codec loses), plus raw training_examples().
            examples = [(lbl, as_batch_audio(_decode(p, codes, self.model))[0], sr)
                        for lbl, codes in (self.seen if decodes else [])] + extra
            decoded = _decode(p, plain, self.model) if plain is not None else audio
            rep.nearest, which = nearest_examples(decoded, sr, examples) if examples else ([], [])
        except Exception as exc:
            rep.notes.append(f"nearest-example search failed: {type(exc).__name__}: {exc}")
            return
        if rep.nearest:
            best = max(range(len(rep.nearest)), key=lambda i: rep.nearest[i].similarity)
            near, ex = rep.nearest[best], examples[which[best]]
            self.out.copies.append((f"generated sample {near.sample}", as_batch_audio(decoded)[near.sample],
                                    ex[0], as_batch_audio(ex[1])[0], ex[2]))


def measure_generation(ctx: Context) -> GenerationOutcome | None:
    if "generate" not in capabilities(ctx.pipeline):
        return None
    s = _Session(ctx)
    for name, phase, what in (("sweep", s.sweep, "configured sampling and one-at-a-time resets"),
                              ("probes", s.probes, "stop condition, positions, training data"),
                              ("training", s.training, "short training and checkpoints"),
                              ("nearest", s.nearest, "nearest training examples")):
        ctx.say(f"generation: {what}")
        with ctx.timed(f"generation.{name}"):
            phase()
    return s.out
