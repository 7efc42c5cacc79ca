"""Fingerprints survive what copies go through and tell other music apart (audio/fingerprint.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import soxr

from signalchain.audio.fingerprint import DIM, FRAME_RATE, align, audio_hash, fingerprint, mono
from signalchain.audit.leakage import MAX_SPREAD_SECONDS, NEAR_COVERAGE, NEAR_SIMILARITY
from signalchain.reference.data import generate_clip

SR = 32000
CLIPS = [generate_clip(i, 31, SR) for i in range(8)]


def _mp3(x: np.ndarray) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, x.T, SR, format="MP3")
    buf.seek(0)
    return sf.read(buf, dtype="float32", always_2d=True)[0].T


COPIES = {
    "gain": lambda x: x * 0.25,
    "resampled": lambda x: soxr.resample(soxr.resample(x.T, SR, 22050), 22050, SR).T,
    "mp3": _mp3,
    "noise": lambda x: x + np.random.default_rng(0).normal(0, 0.01, x.shape).astype(np.float32),
    "shifted crop": lambda x: x[:, 4321 : 4321 + int(0.75 * x.shape[1])],
    "lead-in": lambda x: np.pad(x, ((0, 0), (2000, 0))),
}


@pytest.mark.parametrize("kind", sorted(COPIES))
def test_copies_align_with_one_lag_and_full_coverage(kind: str) -> None:
    for clip in CLIPS[:4]:
        a = fingerprint(clip.audio, SR)
        b = fingerprint(COPIES[kind](clip.audio), SR)
        al = align(a.frames, b.frames)
        assert al.similarity >= NEAR_SIMILARITY and al.coverage >= NEAR_COVERAGE
        assert al.spread_seconds <= MAX_SPREAD_SECONDS
        assert float(np.max(a.windows @ b.windows.T)) > 0.85  # the search finds it


def test_alignment_reports_where_the_copy_starts() -> None:
    x = CLIPS[0].audio
    al = align(fingerprint(x, SR).frames, fingerprint(x[:, SR:], SR).frames)  # b starts 1 s into a
    assert abs(al.lag_seconds - 1.0) <= 1.5 / FRAME_RATE and al.coverage == pytest.approx(1.0, abs=0.02)


def test_other_clips_do_not_align() -> None:
    fps = [fingerprint(c.audio, SR) for c in CLIPS]
    for i in range(len(fps)):
        for j in range(i + 1, len(fps)):
            al = align(fps[i].frames, fps[j].frames)
            assert al.similarity < NEAR_SIMILARITY or al.spread_seconds > MAX_SPREAD_SECONDS


def test_the_same_notes_at_another_tempo_drift() -> None:
    """Two takes of one piece 2 % apart in tempo: the envelope matches, the timing does not."""
    attrs = {k: CLIPS[2].attributes[k] for k in ("tempo", "key_root", "mode", "instrument", "pattern", "register",
                                                  "dynamics", "drums", "channels", "seconds")}
    a = generate_clip(100, 31, SR, attributes={**attrs, "bpm": 100})
    b = generate_clip(100, 31, SR, attributes={**attrs, "bpm": 102})
    al = align(fingerprint(a.audio, SR).frames, fingerprint(b.audio, SR).frames)
    assert al.spread_seconds > MAX_SPREAD_SECONDS


def test_windows_are_unit_vectors_and_silence_has_none() -> None:
    fp = fingerprint(CLIPS[1].audio, SR)
    assert fp.windows.shape[1] == DIM and np.allclose(np.linalg.norm(fp.windows, axis=1), 1.0, atol=1e-5)
    short = fingerprint(CLIPS[1].audio[:, : SR // 2], SR)
    assert short.windows.shape == (1, DIM)
    silent = fingerprint(np.zeros((2, SR)), SR)
    assert silent.silent and silent.windows.shape == (0, DIM)


def test_audio_hash_is_exact_and_blind_to_negative_zero() -> None:
    x = CLIPS[3].audio.copy()
    x[0, 0] = -0.0
    y = x.copy()
    y[0, 0] = 0.0
    assert audio_hash(x) == audio_hash(y)
    y[0, 5] += 1e-7
    assert audio_hash(x) != audio_hash(y)
    stereo = np.repeat(x[:1], 2, axis=0)  # a mono clip repeated by a collate function
    assert audio_hash(mono(stereo)) == audio_hash(mono(x[:1]))
