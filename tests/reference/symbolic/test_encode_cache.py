"""The symbolic bed memoises each window's ids per tokenizer: the same ids as an uncached encode, one
tokenizer call per distinct window, and a tokenizer swapped in (a fault, a user) never served stale ids."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("miditok")

from signalchain.reference.symbolic import tokenizer as tk  # noqa: E402
from signalchain.reference.symbolic.pipeline import SymbolicBedPipeline  # noqa: E402


@pytest.fixture(scope="module")
def pipe():
    return SymbolicBedPipeline()


def _window(pipe, i=0, seed=0):
    return pipe.crop(pipe.pieces()[i], np.random.default_rng(seed))


def _counting(monkeypatch):
    calls = []
    real = tk.encode_notes

    def counting(tokenizer, notes, tempo, ts):
        calls.append(id(tokenizer))
        return real(tokenizer, notes, tempo, ts)

    monkeypatch.setattr(tk, "encode_notes", counting)
    return calls


def test_same_window_is_tokenized_once_and_gives_the_uncached_ids(monkeypatch):
    pipe = SymbolicBedPipeline()
    w = _window(pipe, 1)
    want = tk.encode_notes(pipe.tokenizer, w.notes, w.tempo, w.time_signature)
    calls = _counting(monkeypatch)
    first = pipe.encode(w)
    first.append(-1)  # the caller's list is its own
    again = pipe.encode(_window(pipe, 1))
    assert again == want and len(calls) == 1


def test_a_different_window_is_tokenized_again(pipe, monkeypatch):
    a, b = _window(pipe, 2), _window(pipe, 3)
    assert not np.array_equal(a.notes, b.notes)
    calls = _counting(monkeypatch)
    pipe.encode(a)
    n = len(calls)
    pipe.encode(b)
    assert len(calls) == n + 1


def test_a_new_tokenizer_never_gets_the_old_tokenizers_ids(monkeypatch):
    from dataclasses import replace

    p = SymbolicBedPipeline()
    w = _window(p, 4)
    old = p.encode(w)
    p.tokenizer = tk.build_remi(replace(p.cfg.tokenizer, num_velocities=4))
    calls = _counting(monkeypatch)
    new = p.encode(w)
    assert calls == [id(p.tokenizer)]
    assert new == tk.encode_notes(p.tokenizer, w.notes, w.tempo, w.time_signature)
    assert new != old
