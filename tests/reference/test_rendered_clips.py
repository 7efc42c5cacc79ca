"""The process-wide cache of rendered reference clips: one render per (index, seed, rate), and every
pipeline's clips its own (a fault or a family that changes a clip never reaches another pipeline)."""

from __future__ import annotations

import numpy as np

from signalchain.reference import ReferencePipeline
from signalchain.reference import data as refdata
from signalchain.reference.data import generate_clip, rendered_clip


def _count_renders(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []
    real = refdata.generate_clip

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(refdata, "generate_clip", counting)
    monkeypatch.setattr(refdata, "_RENDERED", {})
    return calls


def test_a_clip_is_rendered_once_per_process_and_equals_a_fresh_render(monkeypatch):
    calls = _count_renders(monkeypatch)
    a = rendered_clip(3, 0, 32000)
    b = rendered_clip(3, 0, 32000)
    assert calls == [(3, 0, 32000)]
    fresh = generate_clip(3, 0, 32000)
    np.testing.assert_array_equal(a.audio, fresh.audio)
    assert (a.caption, a.metadata, a.attributes, a.source_id) == (fresh.caption, fresh.metadata, fresh.attributes,
                                                                   fresh.source_id)
    assert a.audio is not b.audio and a.metadata is not b.metadata


def test_a_different_seed_index_or_rate_is_never_served_from_another_key(monkeypatch):
    calls = _count_renders(monkeypatch)
    base = rendered_clip(5, 0, 32000)
    other_seed = rendered_clip(5, 1, 32000)
    other_index = rendered_clip(6, 0, 32000)
    other_rate = rendered_clip(5, 0, 16000)
    assert len(calls) == 4
    for other in (other_seed, other_index):
        assert base.audio.shape != other.audio.shape or not np.array_equal(base.audio, other.audio)
    assert base.source_id != other_seed.source_id and base.source_id != other_index.source_id
    assert other_rate.sample_rate == 16000 and other_rate.audio.shape[-1] < base.audio.shape[-1]


def test_changing_one_pipelines_clip_changes_no_other_pipeline(monkeypatch):
    calls = _count_renders(monkeypatch)
    first, second = ReferencePipeline(), ReferencePipeline()
    c1 = first.clip(2)
    want = c1.audio.copy()
    c1.audio *= 0.0  # a bug (or a fault) that edits its clip in place
    c1.metadata["title"] = "edited"
    c2 = second.clip(2)
    assert len(calls) == 1  # the second pipeline did not render again
    np.testing.assert_array_equal(c2.audio, want)
    assert c2.metadata["title"] != "edited"
    assert np.abs(c2.audio).max() > 0


def test_the_cache_is_bounded(monkeypatch):
    _count_renders(monkeypatch)
    monkeypatch.setattr(refdata, "_RENDERED_MAX", 2)
    for i in range(4):
        rendered_clip(i, 0, 8000)
    assert list(refdata._RENDERED) == [(2, 0, 8000), (3, 0, 8000)]


def test_clips_rendered_on_threads_are_the_clips_rendered_one_by_one(monkeypatch):
    calls = _count_renders(monkeypatch)
    assert refdata.prerender(range(10, 22), 0, 32000, workers=2) == 12
    assert sorted(calls) == [(i, 0, 32000) for i in range(10, 22)]  # each once
    assert refdata.prerender(range(10, 22), 0, 32000, workers=2) == 0  # all cached: nothing to do
    for i in (10, 15, 21):
        np.testing.assert_array_equal(rendered_clip(i, 0, 32000).audio, generate_clip(i, 0, 32000).audio)
    assert len(calls) == 12  # served from the cache (the comparisons render with the unpatched function)


def test_the_splits_listing_renders_each_clip_once(monkeypatch):
    calls = _count_renders(monkeypatch)
    p = ReferencePipeline()
    splits = p.splits()
    n = sum(len(v) for v in splits.values())
    assert n > refdata.PRERENDER_MIN and len(calls) == n == len(set(calls))
    assert [c.source_id for c in splits["train"]] == [p.clip(i).source_id for i in p.split_indices("train")]
    assert len(calls) == n
