"""The split faults: each leaks validation material into training the way its bug would, and the
clean splits leak nothing. Every symptom is measured directly on `splits()`, the loaders or the
taps, never through a signalchain detector.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import scipy.signal
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.data import Clip
from signalchain.reference.faults import catalogue, get_fault

torch.set_num_threads(1)

CFG = RefConfig(batch_size=4, train_size=16, valid_size=8)
NAMES = {"split_shared_source": "split.shared_id", "split_exact_duplicates": "split.duplicate",
         "split_near_duplicates": "split.near_duplicate",
         "split_overlapping_windows": "split.overlapping_windows",
         "split_alternate_versions": "split.alternate_version",
         "valid_reads_presplit_cache": "split.cache_before_split",
         "norm_fitted_on_all": "split.norm_fitted_on_all",
         "sampler_includes_valid": "split.sampler_includes_eval"}


def _pipe(name: str | None) -> ReferencePipeline:
    return ReferencePipeline(CFG, [name] if name else [])


@pytest.fixture(scope="module")
def clean() -> dict[str, list[Clip]]:
    return _pipe(None).splits()


def _ids(clips: list[Clip]) -> set[str]:
    return {c.metadata["source_id"] for c in clips}


def _hashes(clips: list[Clip]) -> set[str]:
    return {hashlib.sha1(np.ascontiguousarray(c.audio).tobytes()).hexdigest() for c in clips}


def _best_match(clip: Clip, others: list[Clip]) -> float:
    """Highest normalised cross-correlation (any lag) of the mono downmix with any other clip."""
    def mono(c: Clip) -> np.ndarray:
        x = c.audio.mean(axis=0, dtype=np.float64)
        return x[: len(x) // 4 * 4].reshape(-1, 4).mean(axis=1)  # 8 kHz is plenty to compare

    a = mono(clip)
    best = 0.0
    for other in others:
        b = mono(other)
        corr = scipy.signal.correlate(a, b, mode="full", method="fft")
        best = max(best, float(np.abs(corr).max() / (np.linalg.norm(a) * np.linalg.norm(b))))
    return best


def _shares_audio_verbatim(clip: Clip, others: list[Clip], seconds: float = 0.5) -> bool:
    """Whether the first or last `seconds` of the clip occur sample for sample inside another."""
    n = int(seconds * clip.sample_rate)
    row = np.ascontiguousarray(clip.audio[0])
    needles = [row[:n].tobytes(), row[-n:].tobytes()]
    return any(needle in np.ascontiguousarray(o.audio[0]).tobytes() for o in others for needle in needles)


# ---- registration and a step that runs ------------------------------------------------------------

def test_every_split_fault_is_registered_with_its_id() -> None:
    assert {f.name for f in catalogue("splits")} == set(NAMES)
    for name, finding in NAMES.items():
        f = get_fault(name)
        assert f.expected_ids == (finding,) and f.expected_stage == "split"
        assert f.symptom == "too-good-validation" and f.section == "Suspiciously good validation results"


@pytest.mark.parametrize("name", sorted(NAMES))
def test_faulty_pipeline_builds_and_steps(name: str) -> None:
    p = _pipe(name)
    out = p.step(p.build_model(0), next(p.loader("train", 0)))
    assert torch.isfinite(out.loss)
    splits = p.splits()
    assert [len(splits["train"]), len(splits["valid"])] == [CFG.train_size, CFG.valid_size]


def test_clean_splits_share_nothing(clean: dict[str, list[Clip]]) -> None:
    train, valid = clean["train"], clean["valid"]
    assert not _ids(train) & _ids(valid) and not _hashes(train) & _hashes(valid)
    assert not {c.metadata["title"] for c in train} & {c.metadata["title"] for c in valid}
    assert not any(_shares_audio_verbatim(c, train) for c in valid)
    assert max(_best_match(c, train) for c in valid) < 0.6


# ---- the same material on both sides ------------------------------------------------------------

def test_shared_source_ids_across_splits() -> None:
    s = _pipe("split_shared_source").splits()
    shared = _ids(s["train"]) & _ids(s["valid"])
    assert len(shared) == CFG.valid_size // 2
    assert not _hashes(s["train"]) & _hashes(s["valid"])  # other audio: the other half
    names = {c.metadata["name"] for c in s["train"] + s["valid"] if c.metadata["source_id"] in shared}
    assert len(names) == 2 * len(shared)  # two rows (segments) per shared source


def test_exact_duplicates_across_splits() -> None:
    s = _pipe("split_exact_duplicates").splits()
    assert len(_hashes(s["train"]) & _hashes(s["valid"])) == CFG.valid_size // 2
    assert not _ids(s["train"]) & _ids(s["valid"])  # each copy has its own id


def test_near_duplicates_across_splits(clean: dict[str, list[Clip]]) -> None:
    s = _pipe("split_near_duplicates").splits()
    assert not _hashes(s["train"]) & _hashes(s["valid"]) and not _ids(s["train"]) & _ids(s["valid"])
    matches = [_best_match(c, s["train"]) for c in s["valid"]]
    assert sum(m > 0.95 for m in matches) == CFG.valid_size // 2  # gain, shift, noise, resample


def test_overlapping_windows_share_audio_across_splits() -> None:
    s = _pipe("split_overlapping_windows").splits()
    assert not _hashes(s["train"]) & _hashes(s["valid"]) and not _ids(s["train"]) & _ids(s["valid"])
    overlapping = [c for c in s["valid"] if _shares_audio_verbatim(c, s["train"])]
    assert len(overlapping) >= CFG.valid_size // 2


def test_alternate_versions_across_splits() -> None:
    s = _pipe("split_alternate_versions").splits()

    def works(clips: list[Clip]) -> set[tuple[str, str]]:
        return {(c.metadata["title"], c.metadata["artist"]) for c in clips}

    shared = works(s["train"]) & works(s["valid"])
    assert len(shared) == CFG.valid_size // 2
    assert not _hashes(s["train"]) & _hashes(s["valid"]) and not _ids(s["train"]) & _ids(s["valid"])
    for title, _ in shared:  # another rendering: not the same audio, not a near-copy either
        train = next(c for c in s["train"] if c.metadata["title"] == title)
        valid = next(c for c in s["valid"] if c.metadata["title"] == title)
        assert train.attributes["key_root"] == valid.attributes["key_root"]
        assert _best_match(valid, [train]) < 0.95


# ---- leaks through processing -------------------------------------------------------------------

def _loader_ids(p: ReferencePipeline, split: str, batches: int) -> set[str]:
    it = p.loader(split, 0)
    return {m["source_id"] for _ in range(batches) for m in next(it).metadata}


def test_valid_loader_reads_training_examples_from_the_presplit_cache(clean: dict[str, list[Clip]]) -> None:
    p = _pipe("valid_reads_presplit_cache")
    train_ids, valid_ids = _ids(clean["train"]), _ids(clean["valid"])
    assert _ids(p.splits()["valid"]) == valid_ids  # the split lists are right ...
    seen = _loader_ids(p, "valid", 2)
    assert seen <= train_ids and not seen & valid_ids  # ... the validation loader is not
    assert _loader_ids(_pipe(None), "valid", 2) <= valid_ids
    assert _loader_ids(p, "train", 4) == _loader_ids(_pipe(None), "train", 4)  # training unchanged


def test_normalisation_statistics_include_the_validation_audio(clean: dict[str, list[Clip]]) -> None:
    def normaliser(p: ReferencePipeline) -> tuple[float, float]:
        """(gain, offset) of the map audio.resampled (downmixed) -> audio.mono, fitted on clip 0."""
        with record(values=True) as t:
            p.step(p.build_model(0), p.golden_batch(0), tap)
        n = int(t["audio.mono"].meta["lengths"][0])
        x = t.value("audio.resampled")[0, :, :n].mean(axis=0, dtype=np.float64)
        y = t.value("audio.mono")[0, 0, :n].astype(np.float64)
        gain, offset = np.polyfit(x, y, 1)
        assert np.abs(gain * x + offset - y).max() < 1e-6  # exactly affine
        return float(gain), float(offset)

    def stats(clips: list[Clip]) -> tuple[float, float]:
        x = np.concatenate([c.audio.mean(axis=0, dtype=np.float64) for c in clips])
        return float(x.mean()), float(x.std())

    gain, offset = normaliser(_pipe("norm_fitted_on_all"))
    mean_all, std_all = stats(clean["train"] + clean["valid"])
    mean_train, std_train = stats(clean["train"])
    fitted_mean = -offset / gain
    assert abs(fitted_mean - mean_all) < 0.01 * abs(mean_all - mean_train)
    assert 0.1 / gain == pytest.approx(std_all, rel=1e-5) and abs(std_all - std_train) > 1e-4
    assert normaliser(_pipe(None)) == pytest.approx((1.0, 0.0), abs=1e-7)  # clean: no normaliser


def test_training_sampler_includes_validation_examples(clean: dict[str, list[Clip]]) -> None:
    batches = (CFG.train_size + CFG.valid_size) // CFG.batch_size  # one epoch of everything
    p = _pipe("sampler_includes_valid")
    assert _ids(p.splits()["train"]) == _ids(clean["train"])  # the split lists are right ...
    assert _loader_ids(p, "train", batches) & _ids(clean["valid"])  # ... the sampler is not
    assert not _loader_ids(_pipe(None), "train", batches) & _ids(clean["valid"])
