"""The doctor's splits family on the reference pipeline: every catalogue split fault is found at the
"split" stage, leaks written differently here are found too, and the clean pipeline stays silent.

Every run goes through `ProtocolView` (no configuration, no fault names visible). The reference is
shrunk to 96 training and 16 validation clips; clips are shared between pipelines (they depend only
on their index and seed), so each is rendered once.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch

from signalchain.experiments.doctor import run_doctor
from signalchain.findings import Finding
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.data import Clip, generate_clip
from signalchain.reference.faults import catalogue

torch.set_num_threads(1)
SMALL = RefConfig(train_size=96, valid_size=16)
CLIPS: dict[tuple[int, int], Clip] = {}
SPLIT_FAULTS = {f.name: f for f in catalogue() if f.family == "splits"}


def _make(cls: type[ReferencePipeline] = ReferencePipeline, faults: tuple[str, ...] = ()) -> ReferencePipeline:
    p = cls(SMALL, faults=faults)
    p._clip_cache = CLIPS  # clean clips are a function of (index, seed): render each once
    return p


def _run(p: ReferencePipeline, seed: int = 0) -> list[Finding]:
    return run_doctor(ProtocolView(p), families=["splits"], seed=seed, budget="economy").findings


def _loud(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity.value in ("warning", "error")]


def test_catalogue_has_the_eight_split_faults() -> None:
    assert len(SPLIT_FAULTS) == 8


@pytest.mark.parametrize("name", sorted(SPLIT_FAULTS))
def test_catalogue_split_fault_is_found_at_the_split_stage(name: str) -> None:
    fault = SPLIT_FAULTS[name]
    found = _loud(_run(_make(faults=(name,))))
    hits = [f for f in found if f.id in fault.expected_ids]
    assert hits, f"{name}: expected {fault.expected_ids}, found {[(f.id, f.message[:80]) for f in found]}"
    assert all(f.stage == "split" for f in hits)


def test_clean_pipeline_is_silent_over_seeds() -> None:
    p = _make()
    for seed in range(5):
        assert _loud(_run(p, seed)) == [], seed


# ---- leaks written here, differently from the catalogue ----------------------------------------

def _mp3(x: np.ndarray, sr: int) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, x.T, sr, format="MP3")
    buf.seek(0)
    return sf.read(buf, dtype="float32", always_2d=True)[0].T


class _Leaky(ReferencePipeline):
    """Validation row j (even rows) replaced by `leak(j, seed)`; made once per (row, seed)."""

    def clip(self, index: int, seed: int = 0) -> Clip:
        j = index - self.cfg.train_size
        if 0 <= j < self.cfg.valid_size and j % 2 == 0:
            leaks = self.__dict__.setdefault("_leaks", {})  # this pipeline's own, not the shared clips
            if (j, seed) not in leaks:
                leaks[j, seed] = self.leak(j, seed)
            return leaks[j, seed]
        return super().clip(index, seed)

    def leak(self, j: int, seed: int) -> Clip:
        raise NotImplementedError


def _as(clip: Clip, new_id: str, audio: np.ndarray | None = None, **meta: Any) -> Clip:
    metadata = {**clip.metadata, "name": new_id, "source_id": new_id, "title": f"Clip {new_id}", **meta}
    return replace(clip, audio=clip.audio if audio is None else audio.astype(np.float32), metadata=metadata,
                   source_id=metadata["source_id"])


class RemasteredCopies(_Leaky):
    def leak(self, j: int, seed: int) -> Clip:
        src = super().clip((5 * j + 1) % self.cfg.train_size, seed)  # a remaster: quieter, MP3, trimmed intro
        audio = _mp3(src.audio * 10 ** (-4 / 20), src.sample_rate)[:, int(0.12 * src.sample_rate) :]
        return _as(src, f"remaster-{j}", audio)


class RetakeUnderSameId(_Leaky):
    def leak(self, j: int, seed: int) -> Clip:
        other = generate_clip(5000 + j, seed, self.cfg.source_sample_rate)  # a retake: new audio, old id
        return _as(other, f"take2-{j}", source_id=super().clip(j, seed).source_id)


class LiveVersion(_Leaky):
    def leak(self, j: int, seed: int) -> Clip:
        studio = super().clip(j + 3, seed)
        live = generate_clip(6000 + j, seed, self.cfg.source_sample_rate)
        return _as(live, f"live-{j}", title=f"{studio.metadata['title']} [Live]", artist=studio.metadata["artist"])


class SlidingWindows(_Leaky):
    """Rows j and train row j are 3 s windows, 2 s apart, of one 5 s recording."""

    def clip(self, index: int, seed: int = 0) -> Clip:
        if index < self.cfg.valid_size and index % 2 == 0:
            return self._window(index, seed, 0.0)
        return super().clip(index, seed)

    def leak(self, j: int, seed: int) -> Clip:
        return self._window(j, seed, 2.0)

    def _window(self, j: int, seed: int, start: float) -> Clip:
        whole = generate_clip(7000 + j, seed, self.cfg.source_sample_rate, seconds=5.0)
        sr = whole.sample_rate
        return _as(whole, f"rec{j}@{start:g}", whole.audio[:, int(start * sr) : int((start + 3) * sr)])


class WeightedSamplerOverAll(ReferencePipeline):
    """Training batches drawn with replacement from train + valid, validation weighted ×0.5."""

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[Any]:
        if split != "train":
            yield from super().loader(split, seed)
            return
        rows = np.arange(self.cfg.train_size + self.cfg.valid_size)
        w = np.where(rows < self.cfg.train_size, 1.0, 0.5)
        rng = np.random.default_rng(seed)
        while True:
            pick = rng.choice(rows, size=self.cfg.batch_size, p=w / w.sum())
            yield self.make_batch(pick.tolist(), seed=int(rng.integers(2**31)))


class ModuloFeatureCache(ReferencePipeline):
    """Features cached in a list of training size; every split looks rows up modulo its length."""

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[Any]:
        rows = np.array(self.split_indices(split)) % self.cfg.train_size
        rng = np.random.default_rng(seed)
        while True:
            for b in range(0, len(rows) - self.cfg.batch_size + 1, self.cfg.batch_size):
                yield self.make_batch(rng.permutation(rows)[b : b + self.cfg.batch_size].tolist(), seed=b)


class ClipMeanNormalisation(ReferencePipeline):
    """Standardised with the mean of per-clip means over every row (validation included)."""

    def normalize(self, audio: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if not hasattr(self, "_mu"):
            clips = [self.clip(i).audio.mean(axis=0) for i in range(self.cfg.train_size + self.cfg.valid_size)]
            self._mu = float(np.mean([c.mean() for c in clips]))
            self._sd = float(np.mean([c.std() for c in clips]))
        out = audio.copy()
        for i, n in enumerate(lengths):
            out[i, :, :n] = (audio[i, :, :n] - self._mu) / (4 * self._sd)
        return out


OWN_BUGS = {
    RemasteredCopies: "split.near_duplicate",
    RetakeUnderSameId: "split.shared_id",
    LiveVersion: "split.alternate_version",
    SlidingWindows: "split.overlapping_windows",
    WeightedSamplerOverAll: "split.sampler_includes_eval",
    ModuloFeatureCache: "split.cache_before_split",
    ClipMeanNormalisation: "split.norm_fitted_on_all",
}


@pytest.mark.parametrize("cls", list(OWN_BUGS), ids=lambda c: c.__name__)
def test_leaks_written_differently_are_found(cls: type[ReferencePipeline]) -> None:
    found = _loud(_run(_make(cls)))
    assert any(f.id == OWN_BUGS[cls] and f.stage == "split" for f in found), [(f.id, f.message[:80]) for f in found]


def test_metrics_show_the_pairs_and_let_you_listen() -> None:
    res = run_doctor(ProtocolView(_make(RemasteredCopies)), families=["splits"], budget="economy")
    assert res.metrics["splits.matches"]["rows"] and res.metrics["splits.listen"]["clips"]
    assert {r[0] for r in res.metrics["splits.sizes"]["rows"]} == {"train", "valid"}


def test_a_pipeline_without_splits_gets_an_info() -> None:
    from toy_pipeline import ToyPipeline  # type: ignore[import-not-found]

    found = run_doctor(ToyPipeline(), families=["splits"], budget="economy").findings
    assert [f.id for f in found] == ["pipeline.capability_missing"]


# ---- splits() in the forms real pipelines return them ------------------------------------------

def _row(clip: Clip, form: str, folder: Any = None) -> dict[str, Any]:
    meta = {"caption": clip.caption, "source_id": clip.source_id, **clip.metadata}
    if form == "metadata":  # a dataset's rows without their audio
        return meta
    if form == "hf_audio":  # a `datasets` row with a decoded Audio feature
        return {"audio": {"array": clip.audio.mean(axis=0), "sampling_rate": clip.sample_rate, "path": None}, **meta}
    path = folder / f"{clip.metadata.get('name', clip.source_id)}.wav"
    if not path.exists():
        sf.write(path, clip.audio.T, clip.sample_rate, subtype="FLOAT")
    return {"audio_filepath" if form == "path" else "audio": str(path) if form == "path" else {"path": str(path)},
            **meta}


class RowSplits(ReferencePipeline):
    form = "metadata"
    folder: Any = None
    leak_id = False

    def splits(self) -> dict[str, list[Any]]:
        out = {s: [_row(c, self.form, self.folder) for c in clips] for s, clips in super().splits().items()}
        if self.leak_id:  # one validation row names a training recording
            out["valid"][0] = {**out["valid"][0], "source_id": out["train"][3]["source_id"]}
        return out


def _rows(form: str, folder: Any = None, leak_id: bool = False) -> RowSplits:
    p = _make(RowSplits)
    p.form, p.folder, p.leak_id = form, folder, leak_id
    return p


def test_metadata_only_splits_get_one_info_and_their_ids_still_judged() -> None:
    found = _run(_rows("metadata"))
    assert _loud(found) == []
    assert [f.id for f in found if f.id in ("split.no_audio", "file.unreadable")] == ["split.no_audio"]
    leaked = _loud(_run(_rows("metadata", leak_id=True)))
    assert [f.id for f in leaked] == ["split.shared_id"]


@pytest.mark.parametrize("form", ["hf_audio", "hf_path", "path"])
def test_rows_carrying_or_naming_their_audio_are_audited_like_clips(form: str, tmp_path: Any) -> None:
    found = _run(_rows(form, tmp_path))
    assert _loud(found) == [], [(f.id, f.message[:80]) for f in _loud(found)]
    assert not any(f.id == "split.no_audio" for f in found)


def test_a_row_naming_a_missing_file_is_one_finding(tmp_path: Any) -> None:
    class OneMissing(RowSplits):
        def splits(self) -> dict[str, list[Any]]:
            out = super().splits()
            out["valid"][1] = {**out["valid"][1], "audio_filepath": str(tmp_path / "gone.wav")}
            return out

    p = _make(OneMissing)
    p.form, p.folder = "path", tmp_path
    loud = _loud(_run(p))
    assert [(f.id, f.evidence.get("path")) for f in loud] == [("file.missing", str(tmp_path / "gone.wav"))]


# ---- AudioCraft's four splits: evaluation splits may share data (issue 41) ------------------------

class AudioCraftSplits(ReferencePipeline):
    """AudioCraft's dataset configs list train, valid, evaluate and generate, and point `generate` at
    `evaluate`'s files (`dset/audio/*.yaml`): two evaluation splits sharing every clip, which trains on
    nothing it scores. `leak` puts a training clip in `evaluate` too (then in `generate`): a real leak."""

    leak = False

    def split_indices(self, split: str) -> Any:
        valid = list(super().split_indices("valid"))
        if split in ("evaluate", "generate"):
            rows = valid[8:]
            return [super().split_indices("train")[5]] + rows[1:] if self.leak else rows
        return valid[:8] if split == "valid" else super().split_indices(split)

    def splits(self) -> dict[str, list[Clip]]:
        return {s: [self.clip(i) for i in self.split_indices(s)] for s in ("train", "valid", "evaluate", "generate")}


class AudioCraftLeak(AudioCraftSplits):
    leak = True


def test_two_evaluation_splits_sharing_clips_are_not_a_leak() -> None:
    found = _run(_make(AudioCraftSplits))
    assert _loud(found) == [], [(f.id, f.message[:100]) for f in _loud(found)]
    shared = [f for f in found if f.id == "split.duplicate"]
    assert shared and all(f.severity.value == "info" and f.evidence["evaluation_only"] for f in shared)
    assert {tuple(f.evidence["splits"]) for f in shared} == {("evaluate", "generate")}


def test_a_training_clip_in_both_evaluation_splits_is_still_an_error_against_train() -> None:
    found = _loud(_run(_make(AudioCraftLeak)))
    errors = [f for f in found if f.id == "split.duplicate" and f.severity.value == "error"]
    assert errors and all("train" in f.evidence["splits"] for f in errors), [(f.id, f.message[:100]) for f in found]
