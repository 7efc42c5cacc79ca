"""The repetition faults: training-side causes shape the data or the model, generation-side causes
the sampler. Every symptom is measured directly (loader output, taps, model outputs, generated
codes), never through a signalchain detector.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.data import TEMPOS, clip_attributes, generate_clip
from signalchain.reference.faults import catalogue, get_fault

torch.set_num_threads(1)

CFG = RefConfig(batch_size=4, train_size=32, valid_size=8)
TRAINING = {"duplicated_clips", "narrow_adaptation_set", "small_set_overtrained", "short_context_crops",
            "positions_ignored", "ostinato_dominated_data"}
GENERATION = {"greedy_decoding", "low_temperature", "top_k_restrictive", "top_p_restrictive",
              "dominant_loop_prompt", "excessive_guidance", "silence_stop_never_fires"}
DESIGN_IDS = {"generation.repetitive", "generation.greedy", "generation.low_temperature",
              "generation.restrictive_sampling", "generation.dominant_prefix",
              "generation.excessive_guidance", "generation.no_stop", "generation.memorised",
              "loader.repeats", "split.duplicate"}
FRAMES = 40


def _pipe(name: str | None, cfg: RefConfig = CFG) -> ReferencePipeline:
    return ReferencePipeline(cfg, [name] if name else [])


def _loader_ids(p: ReferencePipeline, batches: int) -> list[str]:
    it = p.loader("train", seed=0)
    return [m["source_id"] for _ in range(batches) for m in next(it).metadata]


# ---- registration and a step that runs ------------------------------------------------------------

def test_every_repetition_fault_is_registered_with_ids_and_stage() -> None:
    assert {f.name for f in catalogue("repetition_training")} == TRAINING
    assert {f.name for f in catalogue("repetition_generation")} == GENERATION
    for name in TRAINING | GENERATION:
        f = get_fault(name)
        assert f.expected_ids and set(f.expected_ids) <= DESIGN_IDS, name
        assert f.symptom == "repetitive" and f.section == "Repetitive generated music"
        assert f.cause
    assert {get_fault(n).expected_stage for n in GENERATION} == {"generation"}
    stages = {n: get_fault(n).expected_stage for n in TRAINING}
    assert stages["short_context_crops"] == "crop" and stages["positions_ignored"] == "model"


@pytest.mark.parametrize("name", sorted(TRAINING | GENERATION))
def test_faulty_pipeline_builds_and_steps(name: str) -> None:
    p = _pipe(name)
    model = p.build_model(0)
    out = p.step(model, p.golden_batch(0))
    assert torch.isfinite(out.loss)


def test_clip_attributes_match_the_rendered_clip() -> None:
    for i in (0, 7, 123):
        assert clip_attributes(i) == generate_clip(i).attributes
    with pytest.raises(ValueError, match="must be >= 0"):
        clip_attributes(-1)


# ---- training side ---------------------------------------------------------------------------------

def test_duplicated_clips_loader_keeps_yielding_a_few_clips() -> None:
    faulty, clean = _loader_ids(_pipe("duplicated_clips"), 8), _loader_ids(_pipe(None), 8)
    assert len(set(clean)) == len(clean) == 32  # one epoch: every clip once
    assert len(set(faulty)) <= 8 and Counter(faulty).most_common(1)[0][1] >= 3


def test_narrow_adaptation_set_is_one_instrument_playing_one_figure() -> None:
    p, clean = _pipe("narrow_adaptation_set"), _pipe(None)
    faulty = p.training_examples()
    assert len(faulty) == CFG.train_size
    assert {c.attributes["instrument"] for c in faulty} == {"plucked_string"}
    assert {c.attributes["pattern"] for c in faulty} == {"rising_arpeggio"}
    assert all("plucked string playing a rising arpeggio" in c.caption for c in faulty)
    train, valid = set(p.split_indices("train")), set(p.split_indices("valid"))
    assert not train & valid  # narrow, but no leak
    # The clean training split spans the attribute space.
    attrs = [clip_attributes(i) for i in clean.split_indices("train")]
    assert len({a["instrument"] for a in attrs}) >= 3 and len({a["pattern"] for a in attrs}) >= 4


def test_small_set_overtrained_sees_each_clip_every_other_batch() -> None:
    p = _pipe("small_set_overtrained")
    assert len(p.training_examples()) == 8
    faulty, clean = _loader_ids(p, 10), _loader_ids(_pipe(None), 10)
    counts = Counter(faulty)
    assert len(counts) == 8 and set(counts.values()) == {5}  # 10 batches of 4 = 5 epochs
    assert len(set(clean)) >= 32
    # 1000 steps of 8 are 1000 epochs of the faulty set and under 16 of the clean default one.
    assert 1000 * 8 / 8 > 50 * (1000 * 8 / RefConfig().train_size)


def test_short_context_crops_are_shorter_than_a_beat() -> None:
    def crop_seconds(p: ReferencePipeline) -> tuple[float, int]:
        with record(values=True) as t:
            p.step(p.build_model(0), p.golden_batch(0), tap)
        bounds = t.value("crop")
        return float((bounds[:, 1] - bounds[:, 0]).max()) / p.sample_rate, t.value("tokens").shape[-1]

    seconds, frames = crop_seconds(_pipe("short_context_crops"))
    fastest_beat = 60.0 / max(hi for _, hi in TEMPOS.values())
    assert seconds == pytest.approx(0.3) and seconds < fastest_beat and frames == 15
    assert crop_seconds(_pipe(None))[0] == pytest.approx(2.0)


def test_positions_ignored_model_cannot_tell_steps_apart() -> None:
    def spread_over_steps(model: Any) -> float:
        model.eval()
        k, special = model.config.n_codebooks, model.special_token
        seq = torch.full((1, k, 12), special)  # the same token at every step
        cond, mask = torch.zeros(1, 3, model.config.dim), torch.ones(1, 3, dtype=torch.bool)
        with torch.no_grad():
            logits = model(seq, cond, mask)  # [1, K, S, C]
        return float((logits - logits[:, :, :1]).abs().max())

    faulty = _pipe("positions_ignored").build_model(0)
    assert spread_over_steps(faulty) < 1e-5
    assert spread_over_steps(copy.deepcopy(faulty)) < 1e-5  # the bug survives a checkpoint copy
    assert spread_over_steps(_pipe(None).build_model(0)) > 1e-3


def test_ostinato_dominated_training_data() -> None:
    def ostinato_share(p: ReferencePipeline) -> float:
        return float(np.mean(["ostinato" in c.caption for c in p.training_examples()]))

    assert ostinato_share(_pipe("ostinato_dominated_data")) >= 0.75
    assert ostinato_share(_pipe(None)) <= 0.4


# ---- generation side -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained() -> tuple[Any, Any]:
    """A model fitted for 20 steps on a 2-clip golden batch: confident enough that the sampling
    settings, not noise, decide how varied its output is."""
    p = ReferencePipeline(RefConfig(batch_size=2))
    model, batch = p.build_model(0), p.golden_batch(0)
    optimizer = p.build_optimizer(model)
    for _ in range(20):
        p.train_step(model, optimizer, batch)
    return model, batch


def _generate(name: str | None, trained: tuple[Any, Any], seed: int = 0, **extra: Any) -> Any:
    model, batch = trained
    p = ReferencePipeline(RefConfig(batch_size=2), [name] if name else [])
    with record(values=True) as t:
        result = p.generate(model, batch, {"max_frames": FRAMES, "seed": seed, **extra}, tap)
    assert np.array_equal(t.value("generation.tokens"), result.codes.numpy())
    return result


def _diversity(codes: torch.Tensor) -> tuple[float, float]:
    """(share of tokens equal to the previous frame's, mean distinct tokens per row)."""
    c = codes.numpy()
    same = float(np.mean(c[:, :, 1:] == c[:, :, :-1]))
    distinct = float(np.mean([len(set(row)) for row in c.reshape(-1, c.shape[-1])]))
    return same, distinct


@pytest.fixture(scope="module")
def clean_generation(trained: tuple[Any, Any]) -> tuple[float, float, float]:
    a, b = _generate(None, trained, 0).codes, _generate(None, trained, 1).codes
    return (*_diversity(a), float((a == b).float().mean()))


@pytest.mark.parametrize("name, min_repeat, max_distinct, min_agreement", [
    ("greedy_decoding", 0.9, 3, 1.0),
    ("low_temperature", 0.9, 3, 0.9),
    ("top_k_restrictive", 0.4, 10, 0.25),
    ("top_p_restrictive", 0.9, 3, 0.9),
    ("excessive_guidance", 0.0, 20, 0.15),
])
def test_low_diversity_sampling_repeats_and_ignores_the_seed(
    trained: tuple[Any, Any],
    clean_generation: tuple[float, float, float],
    name: str,
    min_repeat: float,
    max_distinct: float,
    min_agreement: float,
) -> None:
    a, b = _generate(name, trained, 0).codes, _generate(name, trained, 1).codes
    repeat, distinct = _diversity(a)
    agreement = float((a == b).float().mean())  # two seeds, same tokens: the sampler barely samples
    clean_repeat, clean_distinct, clean_agreement = clean_generation
    assert clean_repeat < 0.2 and clean_distinct > 20 and clean_agreement < 0.1
    assert repeat >= min_repeat and repeat > clean_repeat
    assert distinct <= max_distinct < clean_distinct
    assert agreement >= min_agreement > clean_agreement


def test_dominant_loop_prompt_fills_the_output_with_a_loop(trained: tuple[Any, Any]) -> None:
    def periodicity(codes: torch.Tensor) -> float:
        """Best share of frames equal to the frame `lag` before, over lags 1..20."""
        return max(float((codes[:, :, lag:] == codes[:, :, :-lag]).all(1).float().mean())
                   for lag in range(1, 21))

    faulty = _generate("dominant_loop_prompt", trained)
    assert faulty.prompt_frames >= 0.8 * FRAMES
    assert periodicity(faulty.codes) >= 0.7
    clean = _generate(None, trained)
    assert clean.prompt_frames == 0 and periodicity(clean.codes) < 0.2


def test_silence_stop_never_fires_on_a_silent_model(trained: tuple[Any, Any]) -> None:
    silent = copy.deepcopy(trained[0])
    with torch.no_grad():
        for head in silent.heads:  # a collapsed model: code 0 (the codec's silence) every time
            head.bias[0] += 100.0
    stop = {"stop_after_silence_frames": 3, "silence_codes": torch.zeros(silent.config.n_codebooks, dtype=torch.long)}
    clean = _generate(None, (silent, trained[1]), **stop)
    assert clean.stopped and clean.frames_generated == 3
    faulty = _generate("silence_stop_never_fires", (silent, trained[1]), **stop)
    assert not faulty.stopped and faulty.frames_generated == FRAMES
    assert bool((faulty.codes == 0).all())  # 40 frames of silence, and still going
