"""symbolic/render: notes to sound with FluidSynth (when it and a GM soundfont are here) or the additive
fallback, which always runs; a renderer's failure falls back and says so, it never raises."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest

from signalchain.symbolic import notes_table
from signalchain.symbolic import render as R

SR = 16000


def _melody(tempo_rows: int = 4) -> np.ndarray:
    """Four beats of a piano scale, a held bass note and a kick on each beat."""
    rows = [(0, 60 + 2 * i, 0.5 * i, 0.5, 96, 0, 0) for i in range(8)]
    rows += [(0, 36, float(i), 0.25, 110, 0, 1) for i in range(tempo_rows)]
    rows += [(0, 40, 0.0, 4.0, 70, 33, 0)]
    return notes_table(rows)


@pytest.fixture
def no_fluidsynth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "find_fluidsynth", lambda: None)


def _fake_exe(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fluidsynth"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_fallback_plays_the_notes_for_as_long_as_they_last(no_fluidsynth: None) -> None:
    audio = R.render_notes(_melody(), tempo_bpm=120.0, time_signature=(4, 4), sample_rate=SR)
    assert audio.dtype == np.float32 and audio.ndim == 2 and audio.shape[0] == 2
    assert audio.shape[1] >= 2.0 * SR  # four beats at 120 bpm are two seconds
    assert np.isfinite(audio).all() and 0.01 < np.abs(audio).max() <= 0.9
    assert R.renderer_name() == "additive fallback (no fluidsynth on PATH)"


def test_fallback_sounds_at_the_pitch_and_time_of_its_note(no_fluidsynth: None) -> None:
    a4 = notes_table([(0, 69, 1.0, 1.0, 100, 0, 0)])  # A4 = 440 Hz, from beat 1 to 2
    audio = R.render_notes(a4, tempo_bpm=60.0, sample_rate=SR)[0]
    assert np.abs(audio[: int(0.95 * SR)]).max() == 0.0  # silent until its onset (1 s at 60 bpm)
    held = audio[int(1.1 * SR) : int(1.9 * SR)]
    spectrum = np.abs(np.fft.rfft(held))
    assert np.fft.rfftfreq(len(held), 1 / SR)[np.argmax(spectrum)] == pytest.approx(440.0, abs=3.0)


def test_fallback_tempo_scales_time(no_fluidsynth: None) -> None:
    slow = R.render_notes(_melody(), tempo_bpm=60.0, sample_rate=SR)
    fast = R.render_notes(_melody(), tempo_bpm=120.0, sample_rate=SR)
    assert slow.shape[1] > 1.6 * fast.shape[1]


def test_fallback_drums_are_noise_bursts(no_fluidsynth: None) -> None:
    kit = notes_table([(0, 42, i * 0.5, 0.25, 100, 0, 1) for i in range(4)])  # closed hi-hats
    audio = R.render_notes(kit, sample_rate=SR)[0]
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(len(audio), 1 / SR)
    assert spectrum[freqs > 4000].sum() > 10 * spectrum[freqs < 1000].sum()  # a hat is bright


def test_no_notes_is_empty_audio_not_an_error(no_fluidsynth: None) -> None:
    audio = R.render_notes(notes_table([]), sample_rate=SR)
    assert audio.shape == (2, 0) and R.renderer_name() == "nothing to render (no notes)"


def test_garbage_notes_render_what_is_playable(no_fluidsynth: None) -> None:
    rows = _melody().copy()
    rows[0, 2] = np.nan  # onset
    rows[1, 2] = -5.0
    rows[2, 2] = 1e9  # a runaway onset must not make hours of audio
    rows[3, 3] = -1.0  # negative duration
    rows[4, 1] = 500.0  # pitch out of range
    audio = R.render_notes(rows, tempo_bpm=float("nan"), time_signature=(0, 0, 0), sample_rate=SR)
    assert np.isfinite(audio).all() and 0 < audio.shape[1] < (R.MAX_RENDER_SECONDS + 5) * SR


def test_a_missing_soundfont_falls_back_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(R, "find_fluidsynth", lambda: "/usr/bin/fluidsynth")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(tmp_path / "nope.sf2"))
    audio = R.render_notes(_melody(), sample_rate=SR)
    assert audio.shape[1] > 0
    assert R.renderer_name() == f"additive fallback ({R.SOUNDFONT_ENV}={tmp_path / 'nope.sf2'} is not a file)"


def test_a_failing_fluidsynth_falls_back_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sf2 = tmp_path / "gm.sf2"
    sf2.write_bytes(b"RIFF")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(sf2))
    monkeypatch.setattr(R, "find_fluidsynth", lambda: _fake_exe(tmp_path, "echo 'bad soundfont' >&2; exit 3"))
    audio, name = R.render_notes_named(_melody(), sample_rate=SR)
    assert audio.shape[1] > 0
    assert name.startswith("additive fallback (fluidsynth failed: exit 3: bad soundfont")


def test_a_hung_fluidsynth_is_stopped_and_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sf2 = tmp_path / "gm.sf2"
    sf2.write_bytes(b"RIFF")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(sf2))
    monkeypatch.setattr(R, "FLUIDSYNTH_TIMEOUT_S", 0.5)
    monkeypatch.setattr(R, "find_fluidsynth", lambda: _fake_exe(tmp_path, "exec sleep 30"))
    audio, name = R.render_notes_named(_melody(), sample_rate=SR)
    assert audio.shape[1] > 0 and name.startswith("additive fallback (fluidsynth timed out")


def test_a_fluidsynth_that_writes_no_wav_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sf2 = tmp_path / "gm.sf2"
    sf2.write_bytes(b"RIFF")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(sf2))
    monkeypatch.setattr(R, "find_fluidsynth", lambda: _fake_exe(tmp_path, "exit 0"))
    _, name = R.render_notes_named(_melody(), sample_rate=SR)
    assert name.startswith("additive fallback (fluidsynth failed: exit 0")


def _real_fluidsynth() -> bool:
    return R.find_fluidsynth() is not None and R.find_soundfont()[0] is not None


@pytest.mark.skipif(not _real_fluidsynth(), reason="no fluidsynth or no General MIDI soundfont here")
def test_fluidsynth_renders_with_the_soundfont(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(R.SOUNDFONT_ENV, raising=False)
    audio = R.render_notes(_melody(), tempo_bpm=120.0, time_signature=(4, 4), sample_rate=SR)
    assert R.renderer_name().startswith("fluidsynth") and R.renderer_name().endswith(".sf2")
    assert audio.dtype == np.float32 and audio.shape[0] == 2 and 2.0 * SR <= audio.shape[1] <= 3.0 * SR + 1
    assert 0.005 < np.abs(audio).max() < 1.0
    assert np.abs(audio[:, : int(1.9 * SR)]).max() > 0.005  # sound while the notes play; at most 1 s rings on


def _batch() -> list[tuple[np.ndarray, float, tuple[int, int]]]:
    bass = notes_table([(0, 40 + i, float(i), 1.0, 90, 33, 0) for i in range(3)])
    return [(_melody(), 120.0, (4, 4)), (notes_table([]), 100.0, (4, 4)), (bass, 90.0, (3, 4))]


def test_a_batch_renders_as_its_examples_would_one_by_one(no_fluidsynth: None) -> None:
    batch = R.render_examples(_batch(), sample_rate=SR)
    for (audio, name), (rows, tempo, ts) in zip(batch, _batch()):
        alone, alone_name = R.render_notes_named(rows, tempo, ts, SR)
        assert name == alone_name and np.array_equal(audio, alone)
    assert batch[1][0].shape == (2, 0) and batch[1][1] == "nothing to render (no notes)"


def test_a_failing_batch_run_falls_back_example_by_example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sf2 = tmp_path / "gm.sf2"
    sf2.write_bytes(b"RIFF")
    monkeypatch.setenv(R.SOUNDFONT_ENV, str(sf2))
    monkeypatch.setattr(R, "find_fluidsynth", lambda: _fake_exe(tmp_path, "exit 3"))
    names = [name for _, name in R.render_examples(_batch(), sample_rate=SR)]
    assert names[0].startswith("additive fallback (fluidsynth failed: exit 3") and names[2] == names[0]


def _envelope(x: np.ndarray, frame: int = 320) -> np.ndarray:
    x = x[: len(x) // frame * frame]
    return np.sqrt((x.reshape(-1, frame) ** 2).mean(axis=1))


@pytest.mark.skipif(not _real_fluidsynth(), reason="no fluidsynth or no General MIDI soundfont here")
def test_one_fluidsynth_run_for_a_batch_sounds_like_one_run_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(R.SOUNDFONT_ENV, raising=False)
    batch = R.render_examples(_batch(), sample_rate=SR)
    assert batch[1] == (batch[1][0], "nothing to render (no notes)") and batch[1][0].shape == (2, 0)
    for (audio, name), (rows, tempo, ts) in zip(batch, _batch()):
        if not len(rows):
            continue
        alone, alone_name = R.render_notes_named(rows, tempo, ts, SR)
        assert name == alone_name and name.startswith("fluidsynth")
        assert abs(audio.shape[1] - alone.shape[1]) < 0.1 * SR  # the same notes, ringing out the same
        a, b = _envelope(audio.mean(0)), _envelope(alone.mean(0))
        m = min(len(a), len(b))
        assert np.corrcoef(a[:m], b[:m])[0, 1] > 0.9  # in time with each other
