"""A query clip's own windows are never candidates for it: each evaluation split searches an index of
the other splits only. A long loop (one phrase repeated) would otherwise fill every query window's
top-k with itself and push the training copy out."""

from __future__ import annotations

import numpy as np

from signalchain.audio.fingerprint import DIM
from signalchain.audit.leakage import NEIGHBOURS, Entry, find_matches


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_a_looping_evaluation_clip_still_finds_its_training_copy() -> None:
    rng = np.random.default_rng(0)
    phrase = _unit(rng.normal(size=(2, DIM)))
    loop = np.tile(phrase, (4 * NEIGHBOURS, 1))  # the same two windows, over and over
    copy = _unit(loop + 0.02 * rng.normal(size=loop.shape))  # cosine ~0.98 to the loop: a re-encoded copy
    others = [_unit(rng.normal(size=(8, DIM))) for _ in range(3)]
    entries = [Entry("valid", "loop.wav", "loop.wav"), Entry("train", "copy.wav", "copy.wav")]
    entries += [Entry("train", f"o{i}.wav", f"o{i}.wav") for i in range(3)]
    frames_seen: list[int] = []

    def frames_of(i: int) -> None:
        frames_seen.append(i)
        return None  # alignment is not what is tested here

    _, stats = find_matches(entries, [loop, copy, *others], frames_of)
    assert stats["candidates"] == 1 and sorted(set(frames_seen)) == [0, 1]
