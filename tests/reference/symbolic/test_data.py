"""The symbolic bed's data: pieces from music21's corpus, cached on disk and rebuilt when damaged."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("music21")

from signalchain.reference.symbolic import data  # noqa: E402

FEW = data.PIECE_IDS[-1:]  # a short 3/4 air: quick to parse


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(data, "_MEMORY", {})
    return tmp_path


def test_pieces_are_parsed_cached_and_read_back(cache):
    pieces = data.load_pieces(FEW)
    path = data.cache_path(FEW)
    assert path.is_file() and path.parent.parent == cache
    data._MEMORY.clear()
    again = data.load_pieces(FEW)
    assert [p.id for p in again] == [p.id for p in pieces]
    assert all(np.array_equal(a.notes, b.notes) and a.caption == b.caption for a, b in zip(pieces, again))
    assert pieces[0].time_signature == (3, 4) and len(pieces[0].notes)


def test_a_damaged_cache_is_rebuilt(cache):
    pieces = data.load_pieces(FEW)
    path = data.cache_path(FEW)
    path.write_bytes(path.read_bytes()[:100])
    data._MEMORY.clear()
    again = data.load_pieces(FEW)
    assert np.array_equal(again[0].notes, pieces[0].notes)
    assert np.load(path)["notes_0"].shape == pieces[0].notes.shape  # written anew, whole


def test_the_split_is_fixed_by_the_ids():
    ids = [e[0] for e in data.PIECE_IDS]
    a, b = data.split_of(ids), data.split_of(list(reversed(ids)))
    assert a == b and 0.1 < sum(v == "valid" for v in a.values()) / len(ids) < 0.2


def test_the_cache_name_holds_the_music21_version_and_the_list(cache):
    assert data.cache_path(FEW) != data.cache_path(data.PIECE_IDS)
    import importlib.metadata

    assert importlib.metadata.version("music21") in data.cache_path(FEW).name
