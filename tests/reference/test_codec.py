"""The reference codec: shapes, determinism, the silence pattern, and round-trip quality.

Quality is measured with an independent log-mel spectrogram (scipy STFT, HTK mel triangles) and
a chroma profile, not with the codec's own band features.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import soxr

from signalchain.reference.codec import ASSET, Codec, CodecConfig, default_codec
from signalchain.reference.data import generate_clip

SR = 16000


@pytest.fixture(scope="module")
def codec() -> Codec:
    return default_codec()


def clip16k(index: int, **overrides) -> np.ndarray:
    """A held-out generated clip (indices far above any the codec was fitted on), mono 16 kHz."""
    clip = generate_clip(index, attributes=overrides or None)
    return soxr.resample(clip.audio.mean(0), clip.sample_rate, SR).astype(np.float32)


def log_mel(x: np.ndarray, n_mels: int = 64, range_db: float = 80.0) -> np.ndarray:
    """[n_mels, frames] in dB, floored range_db under the loudest cell."""
    freqs, _, z = scipy.signal.stft(x, SR, nperseg=1024, noverlap=768)
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    edges = 700.0 * (10.0 ** (np.linspace(hz_to_mel(30.0), hz_to_mel(8000.0), n_mels + 2)
                              / 2595.0) - 1.0)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    bank = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0.0, None)
    db = 10.0 * np.log10(bank @ np.abs(z) ** 2 + 1e-12)
    return np.maximum(db, db.max() - range_db)


def log_mel_correlation(x: np.ndarray, y: np.ndarray) -> float:
    n = min(x.shape[-1], y.shape[-1])
    return float(np.corrcoef(log_mel(x[:n]).ravel(), log_mel(y[:n]).ravel())[0, 1])


def rms_db(x: np.ndarray) -> float:
    return float(20.0 * np.log10(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)) + 1e-12))


# ---- shapes and determinism -----------------------------------------------------------------


def test_geometry(codec: Codec):
    assert codec.sample_rate == 16000 and codec.hop == 320 and codec.frame_rate == 50.0
    assert codec.n_codebooks == 4 and codec.cardinality == 256
    assert codec.silence_codes.shape == (4,) and codec.frames(16000) == 50
    assert codec.frames(16319) == 50 and codec.frames(319) == 0


@pytest.mark.parametrize("shape", [(16100,), (1, 16100), (3, 1, 16100)])
def test_encode_decode_shapes(codec: Codec, shape: tuple[int, ...]):
    audio = np.random.default_rng(0).normal(0.0, 0.1, shape).astype(np.float32)
    codes = codec.encode(audio)
    batch = shape[0] if len(shape) == 3 else 1
    assert codes.shape == (batch, 4, 50) and codes.dtype == np.int64  # 16100 // 320 = 50
    assert codes.min() >= 0 and codes.max() < 256
    audio_out = codec.decode(codes)
    assert audio_out.shape == (batch, 1, 50 * 320) and audio_out.dtype == np.float32


def test_batch_rows_are_independent(codec: Codec):
    a, b = clip16k(9001)[:32000], clip16k(9002)[:32000]
    both = codec.encode(np.stack([a, b])[:, None])
    np.testing.assert_array_equal(both[0], codec.encode(a)[0])
    np.testing.assert_array_equal(both[1], codec.encode(b)[0])
    np.testing.assert_allclose(codec.decode(both)[1], codec.decode(both[1:])[0], atol=1e-5)


def test_encode_and_decode_are_deterministic(codec: Codec):
    x = clip16k(9003)
    codes = codec.encode(x)
    np.testing.assert_array_equal(codes, codec.encode(x.copy()))
    np.testing.assert_array_equal(codec.decode(codes), codec.decode(codes.copy()))
    assert default_codec() is default_codec()


def test_fit_is_deterministic_in_its_seed():
    audio = [clip16k(i) for i in (9010, 9011)]
    small = CodecConfig(n_bands=32, cardinality=16)
    a, b = Codec.fit(audio, seed=1, config=small), Codec.fit(audio, seed=1, config=small)
    np.testing.assert_array_equal(a.codebooks, b.codebooks)
    assert not np.array_equal(a.codebooks, Codec.fit(audio, seed=2, config=small).codebooks)
    # Code 0 is reserved: the silent floor in codebook 0, "no correction" in the others.
    assert (a.codebooks[0, 0] == small.floor_db).all() and (a.codebooks[1:, 0] == 0).all()
    assert a.encode(audio[0]).max() < 16


def test_shipped_asset_is_small_and_loads_without_pickle():
    assert ASSET.exists() and ASSET.stat().st_size < 2_000_000
    assert np.array_equal(Codec.load(ASSET).codebooks, default_codec().codebooks)


# ---- silence ----------------------------------------------------------------------------------


def test_silence_maps_to_the_silence_codes(codec: Codec):
    rng = np.random.default_rng(0)
    quiet = rng.normal(0.0, 10 ** (-80 / 20), SR).astype(np.float32)  # -80 dBFS noise
    for x in (np.zeros(SR, np.float32), quiet):
        codes = codec.encode(x)
        assert (codes == codec.silence_codes[None, :, None]).all()
    assert (codec.decode(codec.encode(np.zeros(SR, np.float32))) == 0.0).all()


def test_sound_never_uses_the_silence_code_of_codebook_0(codec: Codec):
    tone = 0.001 * np.sin(2 * np.pi * 440.0 * np.arange(SR) / SR)  # -63 dBFS: not silence
    assert (codec.encode(tone)[:, 0] != 0).all()
    x = np.concatenate([np.zeros(SR, np.float32), clip16k(9005)])
    codes = codec.encode(x)
    # Frame f's window spans samples [320 f - 480, 320 f + 800): frames 0..47 see only silence.
    assert (codes[0, :, :48] == codec.silence_codes[:, None]).all()
    sounding = codes[0, 0, 50:] != 0
    assert sounding.mean() > 0.9


# ---- round-trip quality -------------------------------------------------------------------------


def test_round_trip_keeps_loudness_and_spectrum(codec: Codec):
    correlations = []
    for index in range(9020, 9036):
        x = clip16k(index)
        y = codec.decode(codec.encode(x))[0, 0]
        assert np.isfinite(y).all()
        assert abs(rms_db(y) - rms_db(x[: y.shape[0]])) < 3.0
        correlations.append(log_mel_correlation(x, y))
    print(f"\nlog-mel correlation: mean {np.mean(correlations):.3f}, "
          f"min {np.min(correlations):.3f}")
    assert np.mean(correlations) > 0.8 and np.min(correlations) > 0.6


@pytest.mark.parametrize("register", ["low", "mid", "high"])
def test_round_trip_keeps_the_pitch(codec: Codec, register: str):
    """A repeated organ note: the decoded audio's strongest pitch class is the note's."""
    x = clip16k(9030, instrument="organ", pattern="ostinato", drums=False, register=register)
    y = codec.decode(codec.encode(x))[0, 0]

    def pitch_class_profile(signal: np.ndarray) -> np.ndarray:
        power = np.abs(np.fft.rfft(signal)) ** 2
        freqs = np.fft.rfftfreq(signal.shape[0], 1.0 / SR)
        keep = (freqs > 50) & (freqs < 4000)
        classes = np.round(12 * np.log2(freqs[keep] / 440.0)).astype(int) % 12
        return np.bincount(classes, weights=power[keep], minlength=12)

    assert pitch_class_profile(y).argmax() == pitch_class_profile(x).argmax()


# ---- bad input --------------------------------------------------------------------------------


def test_bad_codes_are_rejected_with_the_values(codec: Codec):
    codes = codec.encode(clip16k(9005)[:SR])
    high = codes.copy()
    high[0, 2, 7] = 300
    with pytest.raises(ValueError, match=r"\[0, 255\]; found \[300\] at \[b, k, f\] = \[\[0, 2, 7\]\]"):
        codec.decode(high)
    low = codes.copy()
    low[0, 0, 0] = -1
    with pytest.raises(ValueError, match=r"found \[-1\]"):
        codec.decode(low)
    with pytest.raises(ValueError, match="codes have 3 codebooks .* K=4"):
        codec.decode(codes[:, :3])
    with pytest.raises(ValueError, match="must be integers"):
        codec.decode(codes.astype(np.float32))


def test_bad_audio_is_rejected(codec: Codec):
    with pytest.raises(ValueError, match=r"expected mono audio .* got shape \(2, 16000\)"):
        codec.encode(np.zeros((2, SR), np.float32))
    bad = np.zeros(SR, np.float32)
    bad[5] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        codec.encode(bad)
