"""Every summary against an independent numpy computation, plus properties."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from signalchain.stats import (
    audio_example_summary,
    audio_summary,
    content_hash,
    json_summary,
    tensor_summary,
    text_summary,
)

SR = 16000


def ref_db(x):
    return max(20 * np.log10(x), -120.0) if x > 0 else -120.0


def test_tensor_summary_float_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 7)).astype(np.float32)
    x[0, 0, 0] = np.nan
    x[1, 1, 1] = np.inf
    x[2, 2, 2] = 0.0
    s = tensor_summary(x)
    finite = x[np.isfinite(x)].astype(np.float64)
    assert s["min"] == pytest.approx(finite.min())
    assert s["max"] == pytest.approx(finite.max())
    assert s["mean"] == pytest.approx(finite.mean())
    assert s["std"] == pytest.approx(finite.std())
    assert s["abs_max"] == pytest.approx(np.abs(finite).max())
    assert s["nan_count"] == 1 and s["inf_count"] == 1
    assert s["finite_fraction"] == pytest.approx(103 / 105)
    assert s["zero_fraction"] == pytest.approx(1 / 105)
    assert s["shape"] == [3, 5, 7] and s["dtype"] == "float32"


def test_tensor_summary_int_and_bool():
    x = np.array([[0, 3, 3], [7, 0, 1]], dtype=np.int64)
    s = tensor_summary(x)
    assert (s["min"], s["max"], s["unique"]) == (0, 7, 4)
    assert s["zero_fraction"] == pytest.approx(2 / 6)
    m = np.array([True, False, True, True])
    sb = tensor_summary(m)
    assert sb["true_fraction"] == 0.75 and sb["zero_fraction"] == 0.25


def test_empty_tensor():
    s = tensor_summary(np.zeros((0, 4), dtype=np.float32))
    assert s["numel"] == 0 and s["min"] is None and s["finite_fraction"] == 1.0


def test_hash_depends_on_dtype_shape_and_content():
    a = np.arange(6, dtype=np.int64)
    assert content_hash(a) == content_hash(a.copy())
    assert content_hash(a) != content_hash(a.astype(np.int32))
    assert content_hash(a) != content_hash(a.reshape(2, 3))
    b = a.copy()
    b[5] = 0
    assert content_hash(a) != content_hash(b)


def test_audio_summary_matches_independent_computation():
    t = np.arange(SR) / SR
    left = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.01
    right = 0.3 * np.sin(2 * np.pi * 440 * t + 1.0)
    x = np.stack([left, right])
    x[:, : SR * 3 // 10] = 0.0  # the first 0.3 s (15 frames of 20 ms) is digital silence
    x[0, 5000] = 1.0  # one clipped sample
    s = audio_example_summary(x, SR)
    assert s["rms_dbfs"] == pytest.approx(ref_db(np.sqrt(np.mean(x**2))))
    assert s["peak"] == pytest.approx(1.0)
    dcs = x.mean(axis=1)
    assert s["dc"] == pytest.approx(dcs[np.argmax(np.abs(dcs))])
    frame = SR // 50
    frames = x[:, : (x.shape[1] // frame) * frame].reshape(2, -1, frame)
    frms = np.sqrt((frames**2).mean(axis=(0, 2)))
    assert s["silence_fraction"] == pytest.approx(np.mean(frms < 10 ** (-60 / 20)))
    assert s["silence_fraction"] == pytest.approx(0.3)
    assert s["clipping_fraction"] == pytest.approx(np.mean(np.abs(x) >= 0.999))
    assert s["channel_correlation"] == pytest.approx(np.corrcoef(x[0], x[1])[0, 1])
    mono = x.mean(axis=0)
    assert s["mono_energy_db"] == pytest.approx(10 * np.log10(np.mean(mono**2) / np.mean(x**2)))


def test_channel_cancellation_shows_in_mono_energy():
    t = np.arange(SR) / SR
    s = 0.5 * np.sin(2 * np.pi * 220 * t)
    same = audio_example_summary(np.stack([s, s]), SR)
    flipped = audio_example_summary(np.stack([s, -s]), SR)
    assert same["mono_energy_db"] == pytest.approx(0.0, abs=1e-9)
    assert same["channel_correlation"] == pytest.approx(1.0)
    assert flipped["channel_correlation"] == pytest.approx(-1.0)
    assert flipped["mono_energy_db"] < -200


def test_silence_and_nonfinite():
    z = audio_example_summary(np.zeros((1, SR)), SR)
    assert z["rms_dbfs"] == -120.0 and z["silence_fraction"] == 1.0 and z["mono_energy_db"] is None
    x = np.full((1, 1000), 0.5)
    x[0, :10] = np.nan
    n = audio_example_summary(x, SR)
    assert n["nonfinite_fraction"] == pytest.approx(0.01)


def test_batch_summary_uses_valid_lengths():
    x = np.zeros((2, 1, SR), dtype=np.float32)
    x[0, 0, : SR // 2] = 0.5
    x[1, 0, :] = 0.5
    s = audio_summary(x, SR, lengths=[SR // 2, SR])
    assert s["examples"][0]["silence_fraction"] == 0.0  # padding excluded
    assert audio_summary(x, SR)["examples"][0]["silence_fraction"] == pytest.approx(0.5)
    assert s["batch"] == 2 and s["rms_dbfs_min"] == pytest.approx(ref_db(0.5))


def test_audio_shape_errors_are_clear():
    with pytest.raises(ValueError, match=r"\[T\], \[C, T\] or \[B, C, T\]"):
        audio_summary(np.zeros((1, 1, 1, 4)))


def test_text_and_json_summaries():
    s = text_summary(["a fast tune", "", "a fast tune", "slow"])
    assert s["count"] == 4 and s["empty"] == 1 and s["unique"] == 3 and s["duplicates"] == 1
    assert s["words_max"] == 3 and s["chars_min"] == 0
    j = json_summary([{"key": "A minor", "bpm": 120}, {"key": "", "bpm": 90}, {"bpm": 100}])
    assert j["keys"] == ["bpm", "key"] and j["missing"] == {"key": 2}  # empty or absent


audio_arrays = arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 2000)),
                      elements=st.floats(-1.5, 1.5, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(audio_arrays, st.floats(0.01, 10.0))
def test_gain_shifts_rms_by_its_decibels(x, gain):
    a = audio_example_summary(x, SR)
    b = audio_example_summary(x * gain, SR)
    if a["rms_dbfs"] > -100 and b["rms_dbfs"] > -100:
        assert b["rms_dbfs"] - a["rms_dbfs"] == pytest.approx(20 * math.log10(gain), abs=1e-6)
    for s in (a, b):
        assert 0.0 <= s["silence_fraction"] <= 1.0 and 0.0 <= s["clipping_fraction"] <= 1.0
        assert s["peak"] >= 0


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(0, 50), elements=st.floats(-1e6, 1e6, width=32)))
def test_tensor_summary_bounds(x):
    s = tensor_summary(x)
    if x.size:
        assert s["min"] <= s["mean"] + 1e-3 * max(1, abs(s["mean"])) and s["mean"] <= s["max"] + 1e-3 * max(
            1, abs(s["mean"])
        )
        assert s["abs_max"] == pytest.approx(float(np.abs(x.astype(np.float64)).max()))
