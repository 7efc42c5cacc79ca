"""Vectorised numpy synthesis of the reference pipeline's instruments and drums.

Each voice turns one note (a frequency, a length in samples) into a mono float64 array. Everything
is array arithmetic over whole notes: no per-sample Python loop, so a clip of a few seconds renders
in milliseconds. The timbres are deliberately far apart (harmonic sustained, odd-harmonic
sustained, decaying string, inharmonic bell) so a small model can hear which one a caption names.
"""

from __future__ import annotations

import numpy as np

TABLE_SIZE = 2048  # one wavetable cycle; linear interpolation keeps its error below -80 dB


def midi_to_hz(midi: float | np.ndarray) -> float | np.ndarray:
    return 440.0 * 2.0 ** ((np.asarray(midi, dtype=np.float64) - 69.0) / 12.0)


def envelope(n: int, sample_rate: int, attack: float, release: float, decay: float = 0.0,
             sustain: float = 1.0) -> np.ndarray:
    """Attack-decay-sustain-release gain over n samples (times in seconds). The release always
    ends at zero so that consecutive notes leave an audible gap (a real onset) between them."""
    t = np.arange(n) / sample_rate
    gain = np.minimum(1.0, t / max(attack, 1e-4))
    if decay > 0.0:
        gain = gain * (sustain + (1.0 - sustain) * np.exp(-np.maximum(t - attack, 0.0) / decay))
    tail = (n - np.arange(n)) / (release * sample_rate)  # 1 at the start of the release, 0 at end
    return gain * np.clip(tail, 0.0, 1.0)


def _harmonic_table(amplitudes: dict[int, float]) -> np.ndarray:
    """One cycle [TABLE_SIZE + 1] holding sum_k a_k sin(2 pi k x); the extra sample wraps."""
    spectrum = np.zeros(TABLE_SIZE // 2 + 1, dtype=np.complex128)
    for k, a in amplitudes.items():
        spectrum[k] = -0.5j * a * TABLE_SIZE  # irfft of this gives a_k * sin
    table = np.fft.irfft(spectrum, TABLE_SIZE)
    return np.append(table, table[0])


def _wavetable(table: np.ndarray, freq: float, n: int, sample_rate: int) -> np.ndarray:
    position = (np.arange(n) * (freq * TABLE_SIZE / sample_rate)) % TABLE_SIZE
    i = position.astype(np.int64)
    frac = position - i
    return table[i] * (1.0 - frac) + table[i + 1] * frac


def _band_limited(partials: dict[int, float], freq: float, sample_rate: int) -> dict[int, float]:
    """Drop partials above 0.45 * sample_rate so no voice aliases, whatever the register."""
    limit = 0.45 * sample_rate
    return {k: a for k, a in partials.items() if k * freq < limit}


def organ(freq: float, n: int, sample_rate: int) -> np.ndarray:
    """Additive drawbar organ: fixed sine harmonics, flat sustain."""
    drawbars = {1: 1.0, 2: 0.7, 3: 0.5, 4: 0.35, 6: 0.25, 8: 0.2}
    table = _harmonic_table(_band_limited(drawbars, freq, sample_rate))
    return _wavetable(table, freq, n, sample_rate) * envelope(n, sample_rate, 0.008, 0.03)


def square_lead(freq: float, n: int, sample_rate: int) -> np.ndarray:
    """Band-limited square: odd harmonics at 1/k up to 0.45 * sample_rate. Bright and buzzy."""
    odd = {k: 1.0 / k for k in range(1, int(0.45 * sample_rate / freq) + 1, 2)}
    table = _harmonic_table(_band_limited(odd, freq, sample_rate))
    gain = envelope(n, sample_rate, 0.004, 0.02, decay=0.12, sustain=0.7)
    return 0.8 * _wavetable(table, freq, n, sample_rate) * gain


def plucked_string(freq: float, n: int, sample_rate: int, rng: np.random.Generator,
                   t60: float = 1.2) -> np.ndarray:
    """Karplus-Strong in closed form, vectorised over periods.

    Karplus-Strong feeds one period of noise through a delay line with a lossy averaging filter.
    Treating each period as one row, row b is row 0 filtered b times: in the DFT domain of one
    period that is a per-harmonic gain lambda_k ** b, with lambda_k = g * cos(pi k / N) (the
    averaging filter's magnitude; its half-sample delay is dropped to keep rows exactly periodic).
    All rows come from one broadcasted power; an integer period N >= sample_rate / freq is then
    resampled (linear interpolation) so the pitch is exact instead of rounded to whole samples.
    """
    period = int(np.ceil(sample_rate / freq))  # N, samples per row before retuning
    stretch = period * freq / sample_rate  # >= 1: read the rows this much faster
    rows = int(np.ceil(n * stretch / period)) + 2
    excitation = rng.uniform(-1.0, 1.0, period)
    k = np.arange(period // 2 + 1)
    # A finger (not white noise) excites the string: harmonics roll off as k ** -1.5, so the
    # fundamental dominates and low notes do not sound brighter than high ones.
    row0 = np.fft.rfft(excitation) / np.maximum(k, 1) ** 1.5  # [N // 2 + 1]
    row0[0] = 0.0  # no DC in the string
    g = 1e-3 ** (1.0 / (freq * t60))  # fundamental falls 60 dB in t60 seconds
    lam = g * np.cos(np.pi * k / period)  # per-period gain of harmonic k
    powers = lam[None, :] ** np.arange(rows)[:, None]  # [rows, N // 2 + 1]
    string = np.fft.irfft(row0[None, :] * powers, period, axis=1).reshape(-1)  # [rows * N]
    string *= 0.5 / max(float(np.sqrt(np.mean(string[:period] ** 2))), 1e-12)  # even loudness
    out = np.interp(np.arange(n) * stretch, np.arange(string.shape[0]), string)
    return out * envelope(n, sample_rate, 0.001, 0.02)


def fm_bell(freq: float, n: int, sample_rate: int) -> np.ndarray:
    """FM bell: modulator at 3.5 x the carrier gives inharmonic partials (1, 2.5, 4.5, 6, 8 ...
    x f) none of them below the carrier, and a decaying modulation index dulls the strike."""
    t = np.arange(n) / sample_rate
    ratio = 3.5
    # Sidebands reach about f * (1 + ratio * (index + 1)); keep them under 0.45 * sample_rate.
    index0 = float(np.clip((0.45 * sample_rate / freq - 1.0) / ratio - 1.0, 0.3, 4.0))
    index = index0 * np.exp(-t / 0.25)
    phase = 2.0 * np.pi * freq * t
    tone = np.sin(phase + index * np.sin(ratio * phase))
    return tone * np.exp(-t / 0.6) * envelope(n, sample_rate, 0.002, 0.03)


INSTRUMENTS = ("organ", "square_lead", "plucked_string", "fm_bell")


def render_note(instrument: str, freq: float, n: int, sample_rate: int,
                rng: np.random.Generator) -> np.ndarray:
    if instrument == "organ":
        return organ(freq, n, sample_rate)
    if instrument == "square_lead":
        return square_lead(freq, n, sample_rate)
    if instrument == "plucked_string":
        return plucked_string(freq, n, sample_rate, rng)
    if instrument == "fm_bell":
        return fm_bell(freq, n, sample_rate)
    raise ValueError(f"unknown instrument {instrument!r}; expected one of {INSTRUMENTS}")


# ---- percussion -------------------------------------------------------------------------------


def kick(sample_rate: int) -> np.ndarray:
    """Pitched sine sweep 160 -> 50 Hz with a fast exponential decay."""
    t = np.arange(int(0.25 * sample_rate)) / sample_rate
    freq = 50.0 + 110.0 * np.exp(-t / 0.03)
    phase = 2.0 * np.pi * np.cumsum(freq) / sample_rate
    return np.sin(phase) * np.exp(-t / 0.09)


def snare(sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """High-passed noise (first difference) over a short 190 Hz body."""
    t = np.arange(int(0.18 * sample_rate)) / sample_rate
    noise = np.diff(rng.uniform(-1.0, 1.0, t.shape[0] + 1))
    body = 0.6 * np.sin(2.0 * np.pi * 190.0 * t) * np.exp(-t / 0.04)
    return (0.7 * noise * np.exp(-t / 0.05) + body) * envelope(t.shape[0], sample_rate, 0.001, 0.01)


def hihat(sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """Noise differenced twice (steep high-pass), very short."""
    t = np.arange(int(0.05 * sample_rate)) / sample_rate
    noise = np.diff(rng.uniform(-1.0, 1.0, t.shape[0] + 2), n=2)
    return 0.3 * noise * np.exp(-t / 0.012)


def drum_track(n: int, sample_rate: int, beat_seconds: float, start: int,
               rng: np.random.Generator) -> np.ndarray:
    """Rock beat: kick on beats 1 and 3, snare on 2 and 4, hi-hat on every eighth note."""
    out = np.zeros(n)
    sounds = {"kick": kick(sample_rate), "snare": snare(sample_rate, rng),
              "hihat": hihat(sample_rate, rng)}
    eighth = beat_seconds / 2.0
    for i in range(int((n - start) / (eighth * sample_rate)) + 1):
        at = start + int(round(i * eighth * sample_rate))
        hits = ["hihat"]
        if i % 2 == 0:
            hits.append("kick" if (i // 2) % 2 == 0 else "snare")
        for name in hits:
            sound = sounds[name][: max(0, n - at)]
            out[at : at + sound.shape[0]] += sound
    return out
