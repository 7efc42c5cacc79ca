"""The generation judges on measurements made here: samplers written in this file (Gumbel-max,
argpartition top-k, sorted nucleus), hand-built loops, and hand-filled data records."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.checks.generation import (
    judge_memorised,
    judge_sampler,
    judge_stop,
    judge_training,
    verdict,
)
from signalchain.experiments.generation.metrics import (
    guidance_coefficient,
    sampler_fit,
    token_stats,
)
from signalchain.records.generation import (
    DataVariety,
    GenerationMeasurement,
    GenerationRun,
    NearestExample,
    PositionProbe,
    StopProbe,
)

C, N = 256, 600


def _logits(seed: int = 0, spread: float = 0.3) -> np.ndarray:
    """Broad predictions, like a fresh model's: near-uniform logits."""
    return np.random.default_rng(seed).normal(0.0, spread, (N, C))


def _gumbel_pick(z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sampling from softmax(z) by the Gumbel-max trick (no multinomial anywhere)."""
    return np.argmax(z + rng.gumbel(size=z.shape), axis=-1)


def _sample(z: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "faithful":
        return _gumbel_pick(z, rng)
    if kind == "greedy":
        return z.argmax(-1)
    if kind == "cold":  # temperature 0.1
        return _gumbel_pick(z / 0.1, rng)
    if kind == "top5":
        keep = np.argpartition(-z, 5, axis=-1)[:, :5]
        masked = np.full_like(z, -np.inf)
        np.put_along_axis(masked, keep, np.take_along_axis(z, keep, -1), -1)
        return _gumbel_pick(masked, rng)
    if kind == "nucleus":  # keep the smallest prefix of sorted tokens holding 10% of the mass
        order = np.argsort(-z, axis=-1)
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        cum = np.cumsum(np.take_along_axis(p, order, -1), -1)
        cut = (cum - np.take_along_axis(p, order, -1)) < 0.1
        masked = np.full_like(z, -np.inf)
        rows = np.arange(len(z))[:, None]
        masked[rows, order] = np.where(cut, np.take_along_axis(z, order, -1), -np.inf)
        return _gumbel_pick(masked, rng)
    raise ValueError(kind)


def _report(kind: str, seed: int = 0, guidance: float | None = 3.0, sampled: float = 1.0) -> GenerationMeasurement:
    z = _logits(seed)
    picks = _sample(z, kind, np.random.default_rng(seed + 100))
    run = GenerationRun("configured", {}, seed, stats=token_stats(picks.reshape(2, 4, -1) % 7),
                        fit=sampler_fit(z, picks), guidance=guidance, sampled_share=sampled)
    return GenerationMeasurement(frames=75, prompts=2, frame_rate=50.0, runs=[run])


@pytest.mark.parametrize("seed", range(5))
def test_faithful_sampling_is_silent(seed: int) -> None:
    assert judge_sampler(_report("faithful", seed)) == []


@pytest.mark.parametrize("kind, fid", [("greedy", "generation.greedy"), ("cold", "generation.low_temperature"),
                                       ("top5", "generation.restrictive_sampling"),
                                       ("nucleus", "generation.restrictive_sampling")])
def test_each_narrowing_sampler_is_named(kind: str, fid: str) -> None:
    found = judge_sampler(_report(kind))
    assert [f.id for f in found] == [fid]
    assert found[0].stage == "generation" and found[0].severity.value == "warning"


def test_fitted_temperature_recovers_the_sampler_temperature() -> None:
    z = _logits(3, spread=1.0)
    for tau in (0.3, 1.0, 2.0):
        picks = _gumbel_pick(z / tau, np.random.default_rng(7))
        fit = sampler_fit(z, picks)
        assert fit.temperature == pytest.approx(tau, rel=0.3)
        assert (fit.beyond_rank_expected or 0) < 20


def test_guidance_coefficient_and_the_judge() -> None:
    rng = np.random.default_rng(0)
    cond, uncond = rng.normal(size=(50, C)), rng.normal(size=(50, C))
    for c in (1.5, 3.0, 30.0):
        assert guidance_coefficient(uncond + c * (cond - uncond) + 5.0, cond, uncond) == pytest.approx(c)
    assert [f.id for f in judge_sampler(_report("faithful", guidance=25.0))] == ["generation.excessive_guidance"]
    assert judge_sampler(_report("faithful", guidance=4.0)) == []


def test_a_prefix_that_fills_the_output_is_found() -> None:
    found = judge_sampler(_report("faithful", sampled=0.2))
    assert [f.id for f in found] == ["generation.dominant_prefix"] and "20%" in found[0].message


def test_without_logits_two_identical_seeds_mean_greedy() -> None:
    codes = np.random.default_rng(0).integers(0, 10, (2, 4, 30))
    run = GenerationRun("configured", {}, 0, stats=token_stats(codes))
    rep = GenerationMeasurement(
        frames=30, prompts=2, frame_rate=50.0, runs=[run], seed_agreement=1.0, leading_agreement=1.0
    )
    assert [f.id for f in judge_sampler(rep)] == ["generation.greedy"]
    rep.seed_agreement, rep.leading_agreement = 0.05, 0.8  # sampled, but 80% of frames fixed from the start
    assert [f.id for f in judge_sampler(rep)] == ["generation.dominant_prefix"]


def test_token_stats_find_a_loop_and_its_period() -> None:
    rng = np.random.default_rng(1)
    loop = np.tile(rng.integers(0, 50, (1, 4, 6)), (1, 1, 10))  # a 6-frame figure, ten times
    s = token_stats(loop, frame_rate=50.0)
    assert s.loop_period == 6 and s.loop_strength == pytest.approx(1.0)
    assert s.loop_seconds == pytest.approx(0.12) and s.ngram_repetition > 0.8 and s.longest_repeat > 0.8
    noise = token_stats(rng.integers(0, 256, (2, 4, 60)))
    assert noise.loop_strength < 0.05 and noise.ngram_repetition == 0.0 and noise.longest_repeat < 0.1


def test_stop_judge() -> None:
    fired = StopProbe(frames=40, pattern_frame=10, stop_after=1, frames_generated=11, stopped=True, continued=False)
    assert judge_stop(fired) == []
    ran_on = StopProbe(frames=40, pattern_frame=10, stop_after=1, frames_generated=40, stopped=False, continued=True)
    assert [(f.id, f.stage) for f in judge_stop(ran_on)] == [("generation.no_stop", "generation")]
    unknown = StopProbe(frames=40, pattern_frame=10, stop_after=1, frames_generated=None, stopped=None, continued=True)
    assert judge_stop(unknown) == []  # a pipeline that reports no stop flag is not judged
    assert judge_stop(None) == []


def _data(**kw: object) -> DataVariety:
    base = dict(examples=24, crop_seconds=2.0, clip_seconds=[5.0] * 24, within_entropy=[2.2] * 24,
                profile_similarity=0.05, caption_overlap=0.35)
    base.update(kw)
    return DataVariety(**base)  # type: ignore[arg-type]


def test_training_side_judges() -> None:
    assert judge_training(_data(), PositionProbe(lookups=[])) == []
    assert [(f.id, f.stage) for f in judge_training(_data(crop_seconds=0.4), None)] == [
        ("generation.repetitive", "crop")
    ]
    narrow = _data(profile_similarity=0.5, valid_profile_similarity=0.0)
    assert [(f.id, f.stage) for f in judge_training(narrow, None)] == [("generation.repetitive", "loader")]
    alike = _data(profile_similarity=0.5, alike_ratio=1.1)
    assert [(f.id, f.stage) for f in judge_training(alike, None)] == [("generation.repetitive", "loader")]
    found = judge_training(_data(within_entropy=[0.8] * 20 + [2.5] * 4), None)
    assert [(f.id, f.stage) for f in found] == [("generation.repetitive", "loader")] and "loop" in found[0].message
    # Short crops explain low per-example variety: only the crop is blamed.
    assert [f.stage for f in judge_training(_data(crop_seconds=0.3, within_entropy=[0.5] * 24), None)] == ["crop"]


def test_alike_examples_are_judged_against_the_pipelines_own_data() -> None:
    """Real music shares a spectral tilt: its profiles correlate highly in every split. Only a training
    set more alike than its validation split, or whose examples are as alike as two halves of one, is narrow."""
    real_music = _data(profile_similarity=0.9, valid_profile_similarity=0.88, alike_ratio=4.0)
    assert judge_training(real_music, None) == []
    no_contrast = _data(profile_similarity=0.9, alike_ratio=4.0)  # no validation split, examples differ
    assert judge_training(no_contrast, None) == []


def test_position_judge_needs_a_long_constant_lookup_in_a_big_table() -> None:
    look = {"module": "pos", "rows": 512, "length": 100, "distinct": 1, "constant": True, "ascending": False}
    assert [f.stage for f in judge_training(None, PositionProbe([look]))] == ["model"]
    for harmless in ({**look, "constant": False}, {**look, "rows": 2}, {**look, "length": 4}):
        assert judge_training(None, PositionProbe([harmless])) == []


def test_memorised_and_verdict() -> None:
    near = [NearestExample(0, "clip a", 0.95, 0.4), NearestExample(1, "clip b", 0.5, 0.45)]
    found = judge_memorised(near)
    assert [f.id for f in found] == ["generation.memorised"] and "clip a" in found[0].message
    assert judge_memorised([NearestExample(0, "clip a", 0.95, 0.94)]) == []  # everything alike: no copy
    rep = _report("greedy")
    side, text = verdict(rep, judge_sampler(rep) + found)
    assert side == "both" and "generation.greedy" in text and "generation.memorised" in text
    assert verdict(_report("faithful"), [])[0] == "none"


def test_the_verdict_says_only_what_was_examined() -> None:
    # No loader: the data side was never read, so it cannot be called free of repetition.
    side, text = verdict(_report("faithful"), [])
    assert side == "none" and "not examined" in text and "show no repetition-prone" not in text
    rep = _report("faithful")
    rep.data = DataVariety(examples=16, crop_seconds=2.0, clip_seconds=[4.0], within_entropy=[3.0],
                           profile_similarity=0.3, caption_overlap=0.2)
    assert "16 training examples read show no repetition-prone pattern" in verdict(rep, [])[1]
