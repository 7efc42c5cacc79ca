"""The audit's judges on hand-made evidence: statistics, samplers, loaders, titles, captions, and
statistics recovered from taps (audit/judge_leaks.py, judge_splits.py, judge_items.py, taps.py)."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain import record, tap
from signalchain.audit.inputs import sampler_evidence
from signalchain.audit.judge_items import caption_tokens, judge_captions, judge_item
from signalchain.audit.judge_leaks import (
    FittedStats,
    LoaderEvidence,
    SplitStats,
    judge_loaders,
    judge_norm_stats,
)
from signalchain.audit.judge_splits import judge_alternate_versions, judge_shared_ids, title_key
from signalchain.audit.leakage import Entry
from signalchain.audit.taps import recover_standardisation
from signalchain.records.audit import Item, Measure


def _stats(rng: np.random.Generator, n: int, offset: float) -> SplitStats:
    s = SplitStats()
    for _ in range(n):
        x = rng.normal(offset, 0.2, 4000)
        s.add(x.size, float(x.sum()), float(x @ x))
    return s


@pytest.fixture
def splits() -> dict[str, SplitStats]:
    rng = np.random.default_rng(0)
    return {"train": _stats(rng, 30, 0.0), "valid": _stats(rng, 6, 0.01)}


def test_statistics_of_all_splits_are_named_and_training_ones_pass(splits: dict[str, SplitStats]) -> None:
    everything = splits["train"].merged(splits["valid"]).figures()
    bad = judge_norm_stats(FittedStats("file", everything["mean"], everything["std"]), splits, "train")
    assert [f.id for f in bad] == ["split.norm_fitted_on_all"] and bad[0].severity.value == "warning"
    assert set(bad[0].evidence["matched"]) == {"mean", "std"}
    tr = splits["train"].figures()
    assert judge_norm_stats(FittedStats("file", tr["mean"], tr["std"]), splits, "train") == []
    other = judge_norm_stats(FittedStats("file", 0.5, 3.0), splits, "train")
    assert [f.severity.value for f in other] == ["info"]  # neither: said, not accused


def test_a_count_alone_can_tell(splits: dict[str, SplitStats]) -> None:
    n_all = splits["train"].samples + splits["valid"].samples
    assert judge_norm_stats(FittedStats("file", count=n_all), splits, "train")[0].id == "split.norm_fitted_on_all"


def test_sampler_indices_past_the_training_split_and_named_eval_items() -> None:
    entries = [Entry("train", f"/d/train/{i}.wav", "") for i in range(10)]
    entries += [Entry("valid", f"/d/valid/{i}.wav", "", source_id=f"v{i}") for i in range(3)]
    ev = sampler_evidence(list(range(12)), entries, "train", "s")
    assert ev.beyond == [10, 11] and ev.train_size == 10
    ev = sampler_evidence(["/d/train/1.wav", "v2", "/elsewhere/valid/0.wav"], entries, "train", "s")
    assert ev.hits == {"valid": ["v2"]}  # "0.wav" is a name both splits use: not evidence


def test_loaders_that_serve_the_other_split() -> None:
    train = LoaderEvidence("train", 96, {"train": ["t"] * 80, "valid": ["v1", "v2"]})
    valid = LoaderEvidence("valid", 16, {"train": ["t3", "t4"], "valid": ["v"] * 14})
    found = {f.id: f for f in judge_loaders("train", [train, valid])}
    assert set(found) == {"split.sampler_includes_eval", "split.cache_before_split"}
    assert found["split.cache_before_split"].evidence["own"] == 14
    clean = [LoaderEvidence("train", 96, {"train": ["t"] * 96}), LoaderEvidence("valid", 16, {"valid": ["v"] * 16})]
    assert judge_loaders("train", clean) == []


def test_titles_fold_versions_and_need_an_artist() -> None:
    assert title_key("Blue Train (Live at Newport)", "J. Coltrane") == title_key(
        "blue train - remastered 2003", "j coltrane"
    )
    assert title_key("Blue Train", None) is None
    entries = [
        Entry("train", "a", "a", "h1", title="Song", artist="X"),
        Entry("valid", "b", "b", "h2", title="song [demo]", artist="x"),
        Entry("valid", "c", "c", "h3", title="Song", artist="Y"),
    ]
    found = judge_alternate_versions(entries, [])
    assert len(found) == 1 and found[0].evidence["pairs"][0]["a"] == "b"


def test_shared_ids_only_across_splits() -> None:
    entries = [Entry("train", "a", "a", source_id="s1"), Entry("train", "b", "b", source_id="s1"),
               Entry("valid", "c", "c", source_id="s2"), Entry("test", "d", "d", source_id="s1")]
    found = judge_shared_ids(entries)
    assert len(found) == 1 and found[0].evidence["splits"] == ["test", "train"]


def test_placeholder_captions_warn_and_template_pairs_inform() -> None:
    items = [(Item("train", f"f{i}", caption="Music "), f"h{i}") for i in range(5)]
    items += [(Item("train", "g1", caption="warm organ"), "x1"), (Item("train", "g2", caption="warm organ"), "x2")]
    items += [(Item("train", "g3", caption="warm organ"), "x1")]  # the same clip listed twice: not a caption issue
    found = judge_captions(items)
    assert [(f.id, f.severity.value) for f in found] == [
        ("caption.duplicate", "warning"),
        ("caption.duplicate", "info"),
    ]
    assert found[0].evidence["count"] == 5


def test_pieces_of_one_recording_share_its_caption_without_a_warning() -> None:
    """Chunk files of a take, segments naming their file, clips with one source id: one recording each."""
    chunks = [(Item("train", f"d/take{t}_chunk{k:03d}.wav", path=f"d/take{t}_chunk{k:03d}.wav", caption=f"take {t}"),
               f"h{t}{k}") for t in range(3) for k in range(4)]
    segments = [(Item("train", f"train[{i}]", caption="one song", origin="/music/song.wav"), f"s{i}") for i in range(5)]
    same_id = [(Item("train", f"x{i}", caption="one take", source_id="rec-1"), f"x{i}") for i in range(4)]
    found = judge_captions(chunks + segments + same_id)
    assert [(f.id, f.severity.value) for f in found] == [("caption.duplicate", "info")]
    assert sorted(map(len, found[0].evidence["groups"])) == [4, 4, 4, 4, 5]


def test_a_placeholder_on_numbered_files_still_warns() -> None:
    """Files numbered 0000…0039: the stripped name holds many captions, so each file is its own recording."""
    items = [(Item("train", f"d/{i:04d}.wav", path=f"d/{i:04d}.wav", caption="music" if i < 4 else f"song {i}"),
              f"h{i}") for i in range(40)]
    found = judge_captions(items)
    assert [(f.id, f.severity.value) for f in found] == [("caption.duplicate", "warning")]
    assert found[0].evidence["count"] == 4


def test_duration_tolerance_and_direction() -> None:
    m = Measure(sample_rate=32000, channels=1, samples=32000 * 3, summary={"rms_dbfs": -20.0})
    ok = Item("train", "x.wav", declared={"duration": 3.004, "sample_rate": 32000})
    assert judge_item(ok, m) == []
    long = judge_item(Item("train", "x.wav", declared={"duration": 4.0}), m)
    short = judge_item(Item("train", "x.wav", declared={"duration": 2.0}), m)
    assert [(f.id, f.severity.value) for f in long + short] == [("manifest.duration_mismatch", "error"),
                                                               ("manifest.duration_mismatch", "warning")]
    assert caption_tokens("fast, bright lead") == 4


def _trace(mean: float, scale: float, per_example: bool = False):  # noqa: ANN202
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 0.2, (4, 2, 2000)).astype(np.float32)
    lengths = [2000, 1500, 1800, 900]
    m = x.mean(axis=1, keepdims=True)
    y = np.zeros_like(m)
    for i, n in enumerate(lengths):
        mu = float(m[i, 0, :n].mean()) if per_example else mean
        y[i, :, :n] = (m[i, :, :n] - mu) * scale
    with record(values=True) as t:
        tap("audio.resampled", x, sample_rate=16000, lengths=lengths)
        tap("audio.mono", y, sample_rate=16000, lengths=lengths)
    return t


def test_a_fitted_standardisation_is_recovered_from_taps() -> None:
    fitted = recover_standardisation(_trace(0.0123, 0.5))
    assert fitted is not None and fitted.mean == pytest.approx(0.0123, abs=1e-6)
    assert recover_standardisation(_trace(0.0, 1.0)) is None  # identity: nothing is normalised
    assert recover_standardisation(_trace(0.0, 0.5, per_example=True)) is None  # instance norm: no fitted statistics


def test_in_memory_clips_that_are_not_clips_are_findings() -> None:
    from signalchain.audit.memory import audit_clips

    good = {"audio": np.random.default_rng(0).normal(0, 0.1, (1, 16000)).astype(np.float32), "sample_rate": 16000,
            "caption": "noise"}
    res = audit_clips({"train": [good, {"audio": np.zeros(10)}], "valid": [dict(good, audio=np.full((1, 0), 0.0))]})
    found = {(f.id, f.evidence["path"]) for f in res.findings if f.severity.value == "error"}
    assert found == {("file.unreadable", "train[1]"), ("file.unreadable", "valid[0]")}
    assert len(res.entries) == 3
