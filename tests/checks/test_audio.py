import numpy as np
import pytest

from _traces import make_trace
from signalchain.checks.audio import judge_audio

SR = 16000


def tone(b=3, c=2, seconds=0.5, level=0.3, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(SR * seconds)) / SR
    x = np.stack([np.stack([level * np.sin(2 * np.pi * f * t + ph) for ph in (0.0, 0.2)[:c]])
                  for f in rng.uniform(200, 800, b)])
    return x.astype(np.float32)


def route(original, mono=None, sr_mono=SR, lengths=None):
    mono = original.mean(axis=1, keepdims=True) if mono is None else mono
    meta = {"sample_rate": SR}
    if lengths is not None:
        meta["lengths"] = lengths
    return make_trace(("audio.original", original, meta), ("audio.mono", mono, {**meta, "sample_rate": sr_mono}))


def found(t):
    return [(f.id, f.stage) for f in judge_audio(t)]


@pytest.mark.parametrize("seed", range(3))
def test_clean_route_is_silent(seed):
    assert found(route(tone(seed=seed))) == []


def test_channel_cancellation_is_blamed_on_the_downmix():
    x = tone()
    cancelled = (x[:, :1] - x[:, :1]) / 2
    assert ("audio.channel_cancel", "audio.mono") in found(route(x, cancelled))


def test_out_of_phase_source_is_blamed_on_the_source():
    x = tone()
    x[:, 1] = -x[:, 0]
    assert found(route(x))[0] == ("audio.channel_cancel", "audio.original")


def test_silent_source_and_silence_appearing_later():
    x = tone()
    x[1] = 0.0
    assert ("audio.silent", "audio.original") in found(route(x))
    y = tone()
    mono = y.mean(axis=1, keepdims=True) * 1e-5
    assert ("audio.silent", "audio.mono") in found(route(y, mono))


def test_scale_jump_and_int16_scale():
    x = tone()
    assert ("audio.scale", "audio.mono") in found(route(x, x.mean(axis=1, keepdims=True) * 0.05))
    assert ("audio.scale", "audio.original") in found(route(x * 32767))


def test_clipping_nonfinite_and_dc():
    x = tone(level=1.4)
    assert ("audio.clipped", "audio.original") in found(route(np.clip(x, -1, 1)))
    y = tone()
    y[0, 0, 5] = np.nan
    assert ("audio.nonfinite", "audio.original") in found(route(y))
    z = tone() + 0.2
    assert ("audio.dc_offset", "audio.original") in found(route(z))


def test_sample_rate_declared_wrongly():
    x = tone()
    lengths = [x.shape[-1]] * 3
    t = make_trace(("audio.original", x, {"sample_rate": SR, "lengths": lengths}),
                   ("audio.resampled", x, {"sample_rate": SR // 2, "lengths": lengths}))
    assert ("audio.sample_rate", "audio.resampled") in found(t)


def test_overshoot_is_judged_on_the_written_stage_only():
    from _overshoot import clean, hot
    from signalchain.checks.audio import judge_overshoot

    x = hot()[None, None]  # [B, C, T]
    (f,) = judge_overshoot(make_trace(("audio.written", x, {"sample_rate": SR, "subtype": "FLOAT"})))
    assert (f.id, f.stage, f.severity.value) == ("audio.overshoot", "audio.written", "warning")
    assert f.evidence["peak_dbfs"] == pytest.approx(7.8, abs=0.01)
    assert f.evidence["beyond_full_scale"] == int((np.abs(x) > 1 + 2**-15).sum()) and "0.17%" in f.message
    pcm = judge_overshoot(make_trace(("audio.written", x, {"sample_rate": SR, "subtype": "PCM_16"})))
    assert "the PCM_16 writer clips them" in pcm[0].message
    # float values past ±1 before the writer are not lost: an untrained decoder's output, resampling ringing
    assert judge_overshoot(make_trace(("audio.decoded", 2.5 * x, {"sample_rate": SR}),
                                      ("audio.resampled", 1.06 * clean(0.0)[None, None], {"sample_rate": SR}))) == []
    assert judge_overshoot(make_trace(("audio.written", clean(-1.0)[None, None], {"sample_rate": SR}))) == []


def _entering(lengths, channels=None, sr=32000):
    """A batch as a torchaudio-style own loop taps it: [B, C, T] zero-padded, with lengths= (and channels=)."""
    rng = np.random.default_rng(0)
    x = np.zeros((len(lengths), 2, max(lengths)), np.float32)
    for i, n in enumerate(lengths):
        x[i, :, :n] = 0.1 * rng.standard_normal((2, n))
    meta = {"sample_rate": sr, "lengths": lengths} | ({"channels": channels} if channels else {})
    return make_trace(("audio.original", x, meta))


def test_a_clip_as_long_as_its_channel_count_is_a_layout_error():
    """Issue 41 (transformers#47886): mean(axis=0) on soundfile's [samples, channels]."""
    (f,) = [f for f in judge_audio(_entering([64000, 2, 48000, 2], channels=[1, 2, 1, 2])) if f.id == "audio.layout"]
    assert f.severity.value == "error" and f.evidence["examples"] == [1, 3] and "channels" in f.message
    assert "mean(axis=1)" in f.hint


@pytest.mark.parametrize("lengths", [[64000, 32000, 48000], [17, 20, 30], [64000, 1600]])
def test_clips_of_any_real_length_have_no_layout_finding(lengths):
    assert [f for f in judge_audio(_entering(lengths)) if f.id == "audio.layout"] == []
