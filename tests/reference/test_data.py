"""The generated clips: deterministic, well-formed, and their captions describe the audio.

The audio checks measure with small independent estimators (RMS, power spectrum centroid, energy
rise count, chroma) rather than with anything the generator computes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from signalchain.reference.data import (
    Clip,
    caption_vocabulary,
    caption_words,
    generate_clip,
    generate_clips,
    write_audiocraft_dataset,
)

SR = 32000


def rms_db(x: np.ndarray) -> float:
    return float(20.0 * np.log10(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)) + 1e-12))


def centroid_hz(audio: np.ndarray, sr: int = SR) -> float:
    power = np.abs(np.fft.rfft(audio.mean(0))) ** 2
    freqs = np.fft.rfftfreq(audio.shape[-1], 1.0 / sr)
    return float((freqs * power).sum() / power.sum())


def onsets_per_second(audio: np.ndarray, sr: int = SR, rise_db: float = 6.0) -> float:
    """Count energy rises of more than rise_db within 20 ms (10 ms frames)."""
    x = audio.mean(0).astype(np.float64)
    hop = sr // 100
    energy = (x[: x.shape[0] // hop * hop].reshape(-1, hop) ** 2).mean(1)
    db = 10.0 * np.log10(energy + 1e-10)
    rising = (db[2:] - db[:-2]) > rise_db
    starts = int(rising[0]) + int((rising[1:] & ~rising[:-1]).sum())
    return starts / (x.shape[0] / sr)


def chroma(audio: np.ndarray, sr: int = SR) -> np.ndarray:
    """Energy per pitch class [12] (index 0 = C) from 60 Hz to 2 kHz."""
    x = audio.mean(0)
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(x.shape[0], 1.0 / sr)
    keep = (freqs > 60) & (freqs < 2000)
    pitch_class = np.round(12 * np.log2(freqs[keep] / 440.0) + 9).astype(int) % 12
    return np.bincount(pitch_class, weights=power[keep], minlength=12)


# ---- determinism ----------------------------------------------------------------------------


def test_same_index_and_seed_give_identical_clips():
    a, b = generate_clip(7, seed=3), generate_clip(7, seed=3)
    np.testing.assert_array_equal(a.audio, b.audio)
    assert (a.caption, a.metadata, a.attributes) == (b.caption, b.metadata, b.attributes)


def test_different_seeds_and_indices_differ():
    base = generate_clip(7, seed=0)
    for other in (generate_clip(7, seed=1), generate_clip(8, seed=0)):
        assert other.source_id != base.source_id
        same = other.audio.shape == base.audio.shape and np.allclose(other.audio, base.audio)
        assert not same


def test_generate_clips_is_generate_clip_over_a_range():
    clips = generate_clips(3, seed=2, start=5)
    for i, clip in enumerate(clips):
        np.testing.assert_array_equal(clip.audio, generate_clip(5 + i, seed=2).audio)
    assert [c.source_id for c in clips] == ["ref-s2-000005", "ref-s2-000006", "ref-s2-000007"]
    assert generate_clip(123).source_id == "ref-000123"


def test_overriding_one_attribute_keeps_the_others():
    base = generate_clip(4)
    low = generate_clip(4, attributes={"register": "low"})
    for name, value in base.attributes.items():
        if name != "register":
            assert low.attributes[name] == value, name
    assert low.attributes["register"] == "low" and "low register" in low.caption


def test_bad_overrides_are_rejected():
    with pytest.raises(ValueError, match="unknown attribute 'colour'"):
        generate_clip(0, attributes={"colour": "red"})
    with pytest.raises(ValueError, match="register='huge' is not one of"):
        generate_clip(0, attributes={"register": "huge"})
    with pytest.raises(ValueError, match="index=-1"):
        generate_clip(-1)
    with pytest.raises(ValueError, match="seconds must be > 0, got 0"):
        generate_clip(0, seconds=0)


# ---- well-formed audio, captions and metadata ------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(index=st.integers(0, 10**6), seed=st.integers(0, 2**16))
def test_any_clip_is_finite_unclipped_and_captioned_in_vocabulary(index: int, seed: int):
    clip = generate_clip(index, seed=seed)
    assert clip.audio.dtype == np.float32 and clip.audio.ndim == 2
    assert clip.audio.shape[0] == clip.attributes["channels"] in (1, 2)
    assert np.isfinite(clip.audio).all()
    assert np.abs(clip.audio).max() < 0.99
    assert 1.5 <= clip.audio.shape[1] / SR <= 8.0
    assert set(caption_words(clip.caption)) <= set(caption_vocabulary())
    assert len(caption_words(clip.caption)) <= 24  # fits the reference tokenizer's max_len


def test_caption_vocabulary_is_fixed_lower_case_words():
    vocab = caption_vocabulary()
    assert vocab == caption_vocabulary()
    assert len(vocab) == len(set(vocab))
    assert all(re.fullmatch(r"[a-z]+", w) for w in vocab)


def test_caption_states_each_attribute():
    for i in range(12):
        clip = generate_clip(i)
        a, words = clip.attributes, caption_words(clip.caption)
        assert words[0] == a["tempo"]
        assert f"{a['register']} register" in clip.caption
        assert a["dynamics"] in words and a["mode"] in words
        assert ("with drums" in clip.caption) == a["drums"]
        assert a["instrument"].split("_")[-1] in words


def test_metadata_has_music_info_fields():
    for clip in generate_clips(4):
        m = clip.metadata
        for field in ("title", "artist", "key", "bpm", "genre", "moods", "instrument",
                      "description", "keywords", "name", "source_id"):
            assert field in m, field
        assert m["description"] == clip.caption and m["source_id"] == clip.source_id
        assert re.fullmatch(r"[A-G]#? (major|minor)", m["key"])
        assert isinstance(m["moods"], list) and isinstance(m["keywords"], list)
        assert 70 <= m["bpm"] <= 160
        json.dumps(m)  # plain JSON types only


# ---- the caption is true of the audio --------------------------------------------------------


def test_loud_clips_are_much_louder_than_soft_ones():
    for i in range(6):
        loud = generate_clip(i, attributes={"dynamics": "loud"})
        soft = generate_clip(i, attributes={"dynamics": "soft"})
        assert rms_db(loud.audio) - rms_db(soft.audio) > 8.0
        assert -13.0 < rms_db(loud.audio) < -8.0 and -26.0 < rms_db(soft.audio) < -22.0


@pytest.mark.parametrize("instrument", ["organ", "square_lead", "plucked_string", "fm_bell"])
def test_high_register_is_brighter_than_low(instrument: str):
    for i in range(3):
        common = {"instrument": instrument}
        low = generate_clip(i, attributes={**common, "register": "low"})
        high = generate_clip(i, attributes={**common, "register": "high"})
        assert centroid_hz(high.audio) > 1.3 * centroid_hz(low.audio)


def test_fast_tempo_has_more_onsets_per_second_than_slow():
    for i in range(4):
        slow = generate_clip(i, attributes={"tempo": "slow"})
        fast = generate_clip(i, attributes={"tempo": "fast"})
        slow_rate, fast_rate = onsets_per_second(slow.audio), onsets_per_second(fast.audio)
        assert fast_rate > 1.4 * slow_rate
        # Eighth notes: the onset rate is the note rate, bpm / 30 per second.
        assert slow_rate == pytest.approx(slow.attributes["bpm"] / 30.0, rel=0.25)


def test_mode_sets_the_third():
    for root in ("C", "F#", "A"):
        pitch = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"].index(root)
        fixed = {"instrument": "organ", "pattern": "rising_arpeggio", "drums": False,
                 "key_root": root}
        major = chroma(generate_clip(1, attributes={**fixed, "mode": "major"}).audio)
        minor = chroma(generate_clip(1, attributes={**fixed, "mode": "minor"}).audio)
        assert major[(pitch + 4) % 12] > 3 * major[(pitch + 3) % 12]
        assert minor[(pitch + 3) % 12] > 3 * minor[(pitch + 4) % 12]


def test_drums_add_high_frequency_hits():
    def top_band_share(clip: Clip) -> float:
        power = np.abs(np.fft.rfft(clip.audio.mean(0))) ** 2
        freqs = np.fft.rfftfreq(clip.audio.shape[-1], 1.0 / SR)
        return float(power[freqs > 6000].sum() / power.sum())

    for i in range(4):
        fixed = {"instrument": "organ", "register": "mid"}  # no partials above 6 kHz
        on = generate_clip(i, attributes={**fixed, "drums": True})
        off = generate_clip(i, attributes={**fixed, "drums": False})
        assert top_band_share(on) > 10 * top_band_share(off)


def test_stereo_channels_are_correlated_but_not_identical():
    stereo = generate_clip(2, attributes={"channels": 2})
    mono = generate_clip(2, attributes={"channels": 1})
    assert stereo.audio.shape[0] == 2 and mono.audio.shape[0] == 1
    corr = np.corrcoef(stereo.audio[0], stereo.audio[1])[0, 1]
    assert 0.3 < corr < 0.999


def test_other_sample_rates_and_lengths():
    clip = generate_clip(3, sample_rate=16000, seconds=2.5)
    assert clip.sample_rate == 16000 and clip.audio.shape[-1] == 40000


# ---- the AudioCraft dataset writer -----------------------------------------------------------


@pytest.mark.parametrize("relative", [False, True])
def test_audiocraft_dataset_round_trip(tmp_path: Path, relative: bool):
    clips = generate_clips(3, seed=1)
    manifest = write_audiocraft_dataset(clips, tmp_path / "ds", relative_paths=relative)
    assert manifest == (tmp_path / "ds" / "data.jsonl").resolve()
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(lines) == 3
    for clip, meta in zip(clips, lines, strict=True):
        assert set(meta) == {"path", "duration", "sample_rate", "amplitude", "weight",
                             "info_path"}
        assert Path(meta["path"]).is_absolute() != relative
        wav = Path(meta["path"]) if not relative else manifest.parent / meta["path"]
        assert wav.name == f"{clip.source_id}.wav"
        info = sf.info(str(wav))
        assert info.samplerate == meta["sample_rate"] == clip.sample_rate
        assert info.frames == clip.audio.shape[1] and info.channels == clip.audio.shape[0]
        assert meta["duration"] == pytest.approx(info.duration)
        audio, _ = sf.read(str(wav), dtype="float32", always_2d=True)
        np.testing.assert_allclose(audio.T, clip.audio, atol=1e-4)  # PCM_16 rounding
        sidecar = json.loads(wav.with_suffix(".json").read_text())
        assert sidecar["description"] == clip.caption
        assert {k: sidecar[k] for k in clip.metadata} == clip.metadata
