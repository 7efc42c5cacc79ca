"""The one resampler gives, per method, exactly what the library it wraps gives at each call site."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soxr
from scipy import signal

from signalchain.audio.resample import resample

RNG = np.random.default_rng(0)


def test_equal_rates_return_the_input_itself() -> None:
    x = RNG.standard_normal((2, 100)).astype(np.float32)
    assert resample(x, 16000, 16000) is x
    assert resample(x, 16000, 16000, method="poly") is x


def test_soxr_one_channel_matches_soxr_at_the_quality_asked() -> None:
    x = RNG.standard_normal(4410).astype(np.float32)
    got = resample(x, 44100, 16000, quality="LQ")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, soxr.resample(x, 44100, 16000, quality="LQ"))


def test_soxr_channels_first_matches_soxr_on_time_first() -> None:
    x = RNG.standard_normal((2, 3000)).astype(np.float32)  # [C, T], as the HF loader holds clips
    got = resample(x, 48000, 32000)
    assert got.shape == (2, 2000)
    np.testing.assert_array_equal(got, soxr.resample(x.T, 48000, 32000).T)


def test_soxr_time_first_matches_soxr() -> None:
    x = RNG.standard_normal((3000, 2))  # [T, C], as the HTML player holds audio
    np.testing.assert_array_equal(
        resample(x, 4000, 8000, time_axis=0), soxr.resample(np.ascontiguousarray(x), 4000, 8000)
    )


def test_poly_matches_resample_poly_with_the_gcd_reduced_ratio() -> None:
    x = RNG.standard_normal((2, 4410))
    g = math.gcd(44100, 16000)
    np.testing.assert_array_equal(resample(x, 44100, 16000, method="poly"),
                                  signal.resample_poly(x, 16000 // g, 44100 // g, axis=-1))


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="not 'soxr' or 'poly'"):
        resample(np.zeros(10), 1000, 2000, method="sinc")  # type: ignore[arg-type]
