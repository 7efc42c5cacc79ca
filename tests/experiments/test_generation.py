"""The repetition experiments on the reference pipeline: the clean pipeline is silent over seeds,
every catalogue fault is found where it lives, and so is each bug written in this file (each
implemented differently from the catalogue's version of the same cause)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from signalchain.checks.generation import judge_sampler, judge_stop, judge_training
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import run_doctor
from signalchain.experiments.generation.data import measure_data_variety, probe_positions
from signalchain.experiments.generation.measure import measure_generation
from signalchain.experiments.generation.memory import copy_similarity, fingerprint, nearest_examples
from signalchain.experiments.generation.runs import generate_once, stop_probe, take
from signalchain.pipeline import ProtocolView
from signalchain.records.generation import GenerationMeasurement
from signalchain.reference import RefConfig, ReferencePipeline
from signalchain.reference.faults import catalogue
from signalchain.reference.generate import SamplingConfig

torch.set_num_threads(1)
ECONOMY = BUDGETS["economy"]


def _ctx(p: Any, seed: int = 0) -> Context:
    return Context(ProtocolView(p), seed=seed, budget=ECONOMY)


def _sampler_ids(p: Any, seed: int = 0) -> list[tuple[str, str]]:
    """The configured run on two golden prompts, judged: (id, stage) of what is found."""
    ctx = _ctx(p, seed)
    run, _, _ = generate_once(ctx.pipeline, ctx.fresh_model(), take(ctx.batch(), 2), "configured", {}, seed, 40)
    rep = GenerationMeasurement(frames=40, prompts=2, frame_rate=50.0, runs=[run])
    rep.stop = stop_probe(ctx.pipeline, ctx.fresh_model(), ctx.batch(), 30, seed)
    return [(f.id, f.stage) for f in judge_sampler(rep) + judge_stop(rep.stop)]


# ---- clean ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clean_family() -> Any:
    r = run_doctor(ProtocolView(ReferencePipeline()), families=["generation"], seed=0, budget="economy")
    return r


def test_clean_reference_family_is_silent_and_shows_its_measurements(clean_family: Any) -> None:
    r = clean_family
    assert [(f.id, f.severity.value) for f in r.findings] == [("generation.verdict", "info")]
    assert r.findings[0].evidence["side"] == "none" and "no cause found" in r.findings[0].message
    for key in ("generation.verdict", "generation.runs", "generation.samples", "generation.checkpoints",
                "generation.data"):
        assert key in r.metrics
    rows = {row[0]: row for row in r.metrics["generation.runs"]["rows"]}
    assert {"configured", "configured, next seed", "plain sampling", "greedy = False"} <= set(rows)
    assert r.metrics["generation.samples"]["kind"] == "audio" and r.metrics["generation.samples"]["clips"]
    # one player per row of the settings table, in its order (a row with nothing to hear says why)
    clips = r.metrics["generation.samples"]["clips"]
    assert [c["label"].rsplit(" (", 1)[0] for c in clips] == list(rows)
    assert all(c.get("audio") is not None or c.get("note") for c in clips)


@pytest.mark.parametrize("seed", range(1, 5))
def test_clean_sampler_and_stop_are_silent_over_seeds(seed: int) -> None:
    assert _sampler_ids(ReferencePipeline(), seed) == []


def test_measurements_on_the_clean_reference() -> None:
    out = measure_generation(_ctx(ReferencePipeline()))
    assert out is not None
    rep = out.report
    conf = rep.run("configured")
    assert conf is not None and conf.fit is not None and conf.fit.n == 2 * 4 * 40
    assert conf.fit.top1 < 0.05 and 0.6 < (conf.fit.temperature or 0) < 1.6  # faithful sampling
    assert conf.guidance == pytest.approx(3.0, rel=1e-3) and conf.sampled_share == 1.0
    assert rep.seed_agreement is not None and rep.seed_agreement < 0.05
    assert rep.stop is not None and rep.stop.stopped and rep.stop.frames_generated == rep.stop.pattern_frame + 1
    assert rep.data is not None and rep.data.crop_seconds == pytest.approx(2.0) and rep.data.examples >= 12
    assert judge_training(rep.data, rep.position) == []
    assert any(look["ascending"] and look["rows"] >= look["length"] for look in rep.position.lookups)
    assert [c.step for c in rep.checkpoints] == [0, ECONOMY.gen_train_steps]
    assert all(c.teacher_forced_entropy and c.teacher_forced_entropy > 4.0 for c in rep.checkpoints)
    assert out.samples and all(np.isfinite(a).all() for a in out.samples.values())
    assert rep.nearest and all(n.similarity < 0.9 for n in rep.nearest)


# ---- the catalogue ------------------------------------------------------------------------------------

GENERATION_FAULTS = [f for f in catalogue("repetition_generation")]


@pytest.mark.parametrize("fault", GENERATION_FAULTS, ids=lambda f: f.name)
def test_generation_side_faults_are_found_at_generation(fault: Any) -> None:
    found = _sampler_ids(ReferencePipeline(faults=[fault.name]))
    assert (fault.expected_ids[0], fault.expected_stage) in found


@pytest.mark.parametrize("name", ["narrow_adaptation_set", "short_context_crops", "positions_ignored",
                                  "ostinato_dominated_data"])
def test_training_side_faults_are_found_where_they_live(name: str) -> None:
    ctx = _ctx(ReferencePipeline(faults=[name]))
    model = ctx.fresh_model()
    data, _ = measure_data_variety(ctx, model)
    found = {(f.id, f.stage) for f in judge_training(data, probe_positions(ctx, model))}
    expected = next(f for f in catalogue() if f.name == name)
    assert (expected.expected_ids[0], expected.expected_stage) in found


def test_repeated_data_is_blamed_on_training() -> None:
    """The data family finds the repeats; the generation verdict reads them and blames training."""
    r = run_doctor(ProtocolView(ReferencePipeline(faults=["duplicated_clips"])), symptom="repetitive", budget="economy")
    assert ("loader.repeats", "loader") in {(f.id, f.stage) for f in r.findings}
    verdict = next(f for f in r.findings if f.id == "generation.verdict")
    assert verdict.evidence["side"] == "training" and "TRAINING" in verdict.message


# ---- bugs written here --------------------------------------------------------------------------------

class PercentTemperature(ReferencePipeline):
    """The temperature is read as a percentage: 1.0 becomes 0.01."""

    def sampling_config(self, sampling: Any, frames: int) -> SamplingConfig:
        cfg = super().sampling_config(sampling, frames)
        return replace(cfg, temperature=cfg.temperature / 100.0)


class ZeroTemperature(ReferencePipeline):
    """A wrapper "disables randomness for reproducibility" by sampling at temperature 0 (argmax)."""

    def sample_codes(self, model: Any, cond: Any, cond_mask: Any, cfg: SamplingConfig) -> Any:
        return super().sample_codes(model, cond, cond_mask, replace(cfg, temperature=0.0))


class TopThreeProcessor(ReferencePipeline):
    """A logits processor on the model output keeps three candidates (the rest at -1e9)."""

    def sample_codes(self, model: Any, cond: Any, cond_mask: Any, cfg: SamplingConfig) -> Any:
        def keep3(module: Any, args: Any, logits: torch.Tensor) -> torch.Tensor:
            kth = logits.topk(3, dim=-1).values[..., -1:]
            return logits.masked_fill(logits < kth, -1e9)

        handle = model.register_forward_hook(keep3)
        try:
            return super().sample_codes(model, cond, cond_mask, cfg)
        finally:
            handle.remove()


class GuidanceInPercent(ReferencePipeline):
    def sampling_config(self, sampling: Any, frames: int) -> SamplingConfig:
        cfg = super().sampling_config(sampling, frames)
        return replace(cfg, cfg_coef=cfg.cfg_coef * 10.0)


class LongRandomPrompt(ReferencePipeline):
    """Continuation mode left on: three quarters of every output is a fixed random prompt."""

    def generate(self, model: Any, batch: Any, sampling: Any = None, tap: Any = None) -> Any:
        sampling = dict(sampling or {})
        if sampling.get("prompt") is None:
            frames = int(sampling.get("max_frames", 100))
            gen = torch.Generator().manual_seed(123)
            sampling["prompt"] = torch.randint(1, 256, (len(batch), 4, 3 * frames // 4), generator=gen)
        return super().generate(model, batch, sampling, tap) if tap else super().generate(model, batch, sampling)


class ForgetsStop(ReferencePipeline):
    """The config merge drops the stop keys."""

    def sampling_config(self, sampling: Any, frames: int) -> SamplingConfig:
        cfg = super().sampling_config(sampling, frames)
        return replace(cfg, stop_after_silence_frames=None, silence_codes=None)


@pytest.mark.parametrize("cls, expected", [
    (PercentTemperature, "generation.low_temperature"), (ZeroTemperature, "generation.greedy"),
    (TopThreeProcessor, "generation.restrictive_sampling"), (GuidanceInPercent, "generation.excessive_guidance"),
    (LongRandomPrompt, "generation.dominant_prefix"), (ForgetsStop, "generation.no_stop")])
def test_own_sampler_bugs(cls: type, expected: str) -> None:
    assert (expected, "generation") in _sampler_ids(cls())


class ClampedPositions(torch.nn.Embedding):
    def forward(self, steps: torch.Tensor) -> torch.Tensor:
        return super().forward(steps.clamp(max=0))  # "positions beyond the cache are clamped" — to 0


class NoPositions(ReferencePipeline):
    def build_model(self, seed: int) -> Any:
        model = super().build_model(seed)
        old = model.positions
        model.positions = ClampedPositions(old.num_embeddings, old.embedding_dim)
        model.positions.load_state_dict(old.state_dict())
        return model


class OneFigure(ReferencePipeline):
    """Every clip is rendered as the same organ scale run (a data-generation override)."""

    def clip(self, index: int, seed: int = 0) -> Any:
        from signalchain.reference.data import generate_clip

        return generate_clip(
            index,
            seed,
            self.cfg.source_sample_rate,
            attributes={"instrument": "organ", "pattern": "scale_run", "register": "mid", "drums": False},
        )


class Drones(ReferencePipeline):
    """Every clip repeats one note."""

    def clip(self, index: int, seed: int = 0) -> Any:
        from signalchain.reference.data import generate_clip

        return generate_clip(index, seed, self.cfg.source_sample_rate, attributes={"pattern": "ostinato"})


class HalfSecondWindows(ReferencePipeline):
    def choose_crops(self, lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        starts = np.zeros(len(lengths), dtype=np.int64)
        return np.stack([starts, starts + segment // 4], axis=1)  # a quarter of the window


@pytest.mark.parametrize("cls, stage", [(NoPositions, "model"), (OneFigure, "loader"), (Drones, "loader"),
                                        (HalfSecondWindows, "crop")])
def test_own_training_side_bugs(cls: type, stage: str) -> None:
    ctx = _ctx(cls())
    model = ctx.fresh_model()
    data, _ = measure_data_variety(ctx, model)
    found = {(f.id, f.stage) for f in judge_training(data, probe_positions(ctx, model))}
    assert ("generation.repetitive", stage) in found


# ---- nearest example ---------------------------------------------------------------------------------

def test_a_generated_copy_is_found_shifted_and_rescaled() -> None:
    """A stretch of one training example's tokens, decoded and made quieter, is that example's copy."""
    p = ReferencePipeline()
    ctx = _ctx(p)
    _, seen = measure_data_variety(ctx, ctx.fresh_model())
    longest = max(range(len(seen)), key=lambda i: seen[i][1].shape[-1])
    copy = 0.3 * p.decode(torch.as_tensor(seen[longest][1][:, :, 13:63])).numpy()  # 1 s from 0.26 s in
    examples = [(label, p.decode(torch.as_tensor(codes)).numpy()[0], 16000) for label, codes in seen]
    near, which = nearest_examples(copy, 16000, examples)
    assert which == [longest] and near[0].similarity > 0.9 and near[0].audio_similarity_second < 0.8
    a = fingerprint(examples[0][1], 16000)
    assert copy_similarity(a, a) == pytest.approx(1.0)


def test_audio_loop_hears_a_repeated_phrase_and_not_noise() -> None:
    from signalchain.experiments.generation.metrics import audio_loop

    rng = np.random.default_rng(0)
    sr = 16000
    phrase = rng.normal(0, 0.2, int(0.4 * sr)).astype(np.float32)
    looped = audio_loop(np.tile(phrase, 10), sr)
    noise = audio_loop(rng.normal(0, 0.2, 10 * len(phrase)).astype(np.float32), sr)
    assert looped["loop_seconds"] == pytest.approx(0.4, abs=0.03) and looped["loop_strength"] > 0.8
    assert noise["loop_strength"] < 0.3 < looped["loop_strength"]


def test_generation_runs_carry_the_decoded_audio_loop() -> None:

    p = ReferencePipeline(RefConfig(batch_size=2, segment_seconds=1.0, dim=64, layers=1))
    model = p.build_model(0)
    run, _, _ = generate_once(ProtocolView(p), model, p.golden_batch(0), "greedy", {"greedy": True}, 0, 40)
    assert run.error is None and run.audio_loop is not None
    assert set(run.audio_loop) == {"self_similarity", "loop_seconds", "loop_strength"}


class OneDroppedCaption(ReferencePipeline):
    """Batch 1 (zoo member sym-batch1's setting on the reference): the golden batch of seed 0 holds the
    one example whose caption classifier-free dropout removed, so every word slot is the same (pad)
    id; seed 1's example keeps its caption."""

    def __init__(self) -> None:
        super().__init__(RefConfig(batch_size=1))

    def golden_batch(self, seed: int) -> Any:
        batch = super().golden_batch(seed)
        return replace(batch, captions=[""] if seed == 0 else batch.captions)


def test_a_constant_content_lookup_is_not_a_missing_position() -> None:
    """A word table looked up with one row because the batch's only caption is empty is content, not a
    position signal: on another batch it varies (and a table's padding row is never a position)."""
    ctx = _ctx(OneDroppedCaption())
    model = ctx.fresh_model()
    probe = probe_positions(ctx, model)
    words = [look for look in probe.lookups if look["module"] == "text_encoder.tokens"]
    assert words and not words[0]["constant"] and words[0]["varies_with_data"]
    assert judge_training(None, probe) == []
    pytest.importorskip("miditok")
    from signalchain.reference.symbolic import SymbolicBedConfig, SymbolicBedPipeline

    sym = _ctx(SymbolicBedPipeline(SymbolicBedConfig(batch_size=1, cond_dropout=1.0)))  # every caption dropped
    probe = probe_positions(sym, sym.fresh_model())
    assert [look["constant"] for look in probe.lookups if look["module"] == "word_emb"] == [False]
    assert judge_training(None, probe) == []
