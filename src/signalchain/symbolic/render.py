"""Notes to sound, for listening: FluidSynth with a General MIDI soundfont, or a small additive renderer.

FluidSynth (the `fluidsynth` command) plays a Standard MIDI File written from the notes table
(`to_score`, `score_to_midi_bytes`) with the soundfont named by `SIGNALCHAIN_SOUNDFONT`, or Debian's
(`fluid-soundfont-gm`). Where either is missing, or FluidSynth fails, `fallback_render` plays the
notes itself (harmonic tones under an envelope, drums as filtered noise bursts), so that a player
always has sound; `renderer_name()` says which one ran and why. `render_examples` renders a batch
in one FluidSynth run (its start, loading the soundfont, costs more than a short example). A
rendering is for the ear: nothing compares it, and a renderer's failure is never an error.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._synth import fallback_render, sanitize
from .notes import COL, score_to_midi_bytes, to_score

__all__ = ["RENDER_RATE", "SOUNDFONT_ENV", "SOUNDFONT_PATHS", "FLUIDSYNTH_TIMEOUT_S", "MAX_RENDER_SECONDS",
           "find_soundfont", "find_fluidsynth", "render_notes", "render_notes_named", "render_examples",
           "renderer_name"]

RENDER_RATE = 22050
SOUNDFONT_ENV = "SIGNALCHAIN_SOUNDFONT"
#: Debian's General MIDI soundfonts (`fluid-soundfont-gm`, and what provides `default-GM.sf2`).
SOUNDFONT_PATHS = ("/usr/share/sounds/sf2/FluidR3_GM.sf2", "/usr/share/sounds/sf2/default-GM.sf2",
                   "/usr/share/soundfonts/*.sf2")
FLUIDSYNTH_TIMEOUT_S = 60
#: Notes that start later than this are not played: a runaway onset must not make an hour of audio.
MAX_RENDER_SECONDS = 120.0
_GAIN = "0.5"  # FluidSynth's default (0.2) leaves a solo piano near -25 dBFS
_TAIL_S = 1.0
_last: list[str] = []


def find_soundfont() -> tuple[Path | None, str]:
    """The soundfont to use, or None and why there is none."""
    named = os.environ.get(SOUNDFONT_ENV)
    if named:
        path = Path(named)
        return (path, "") if path.is_file() else (None, f"{SOUNDFONT_ENV}={named} is not a file")
    for pattern in SOUNDFONT_PATHS:
        for found in sorted(glob.glob(pattern)):
            if Path(found).is_file():
                return Path(found), ""
    return None, f"no General MIDI soundfont ({SOUNDFONT_ENV} unset; none at {', '.join(SOUNDFONT_PATHS)})"


def find_fluidsynth() -> str | None:
    return shutil.which("fluidsynth")


@functools.lru_cache(maxsize=4)
def _fluidsynth_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    words = out.split()
    return words[3] if len(words) > 3 and words[:3] == ["FluidSynth", "runtime", "version"] else ""


def _read_wav16(path: Path, sample_rate: int) -> np.ndarray:
    """FluidSynth's output (16-bit PCM) as float32 `[C, S]`."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getframerate() != sample_rate:
            raise ValueError(f"FluidSynth wrote {8 * w.getsampwidth()}-bit audio at {w.getframerate()} Hz")
        channels, data = w.getnchannels(), w.readframes(w.getnframes())
    pcm = np.frombuffer(data, dtype="<i2").reshape(-1, channels)
    return (pcm.T.astype(np.float32) / 32768.0).copy()


def _fluidsynth(rows: np.ndarray, tempo: float, ts: Sequence[int], sample_rate: int, exe: str,
                soundfont: Path) -> np.ndarray:
    with tempfile.TemporaryDirectory(prefix="signalchain-render-") as tmp:
        mid, out = Path(tmp) / "in.mid", Path(tmp) / "out.wav"
        mid.write_bytes(score_to_midi_bytes(to_score(rows, tempo, ts)))
        cmd = [exe, "-ni", "-q", "-g", _GAIN, "-r", str(sample_rate), "-T", "wav", "-O", "s16", "-F", str(out),
               str(soundfont), str(mid)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=FLUIDSYNTH_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"exit {done.returncode}{': ' + tail[0][:120] if tail[0] else ''}")
        return _read_wav16(out, sample_rate)


_FAILURES = (OSError, ValueError, RuntimeError, EOFError, wave.Error, subprocess.SubprocessError)
_EMPTY = "nothing to render (no notes)"


def _prepare(rows: np.ndarray, tempo_bpm: float, time_signature: Sequence[int]) -> tuple[np.ndarray, float,
                                                                                         tuple[int, ...]]:
    tempo = float(tempo_bpm) if np.isfinite(tempo_bpm) and 1.0 <= float(tempo_bpm) <= 1000.0 else 120.0
    ts = tuple(int(v) for v in time_signature) if len(time_signature) == 2 else (4, 4)
    return sanitize(rows, tempo, MAX_RENDER_SECONDS), tempo, ts


def _fluidsynth_or_why() -> tuple[str | None, Path | None, str]:
    exe, (soundfont, why) = find_fluidsynth(), find_soundfont()
    return exe, soundfont, "no fluidsynth on PATH" if exe is None else why


def _name(exe: str, soundfont: Path) -> str:
    version = _fluidsynth_version(exe)
    return f"fluidsynth{' ' + version if version else ''} · {soundfont.name}"


def _failed(exc: BaseException) -> str:
    return f"fluidsynth {'timed out' if isinstance(exc, subprocess.TimeoutExpired) else 'failed'}: {str(exc)[:160]}"


def render_notes_named(rows: np.ndarray, tempo_bpm: float = 120.0, time_signature: Sequence[int] = (4, 4),
                       sample_rate: int = RENDER_RATE) -> tuple[np.ndarray, str]:
    """The notes of one example as float32 stereo audio `[2, S]`, and the renderer that made it."""
    notes, tempo, ts = _prepare(rows, tempo_bpm, time_signature)
    if not len(notes):
        return np.zeros((2, 0), np.float32), _EMPTY
    exe, soundfont, why = _fluidsynth_or_why()
    if exe is not None and soundfont is not None:
        try:
            audio = _fluidsynth(notes, tempo, ts, int(sample_rate), exe, soundfont)
            return _stereo(_trim_tail(audio, notes, tempo, int(sample_rate))), _name(exe, soundfont)
        except _FAILURES as exc:
            why = _failed(exc)
    return fallback_render(notes, tempo, int(sample_rate)), f"additive fallback ({why})"


def render_examples(examples: Sequence[tuple[np.ndarray, float, Sequence[int]]],
                    sample_rate: int = RENDER_RATE) -> list[tuple[np.ndarray, str]]:
    """Several examples `(rows, tempo_bpm, time_signature)`, each as `render_notes_named` would
    render it, in one FluidSynth run: its start (loading the soundfont) is most of what a short
    example costs. The examples are laid one after another in seconds (each at its own tempo, with
    room to ring out) and cut back out. Examples that use more instruments together than MIDI has
    channels, or a run that fails, are rendered one by one."""
    sr = int(sample_rate)
    prepared = [_prepare(rows, tempo, ts) for rows, tempo, ts in examples]
    exe, soundfont, _ = _fluidsynth_or_why()
    keys = {(int(r[COL["program"]]), int(r[COL["drum"]])) for notes, _, _ in prepared for r in notes}
    if exe is None or soundfont is None or len(keys) > 15 or sum(len(n) > 0 for n, _, _ in prepared) < 2:
        return [render_notes_named(n, tempo, ts, sr) for n, tempo, ts in prepared]
    rows, spans, at = [], [], 0.0  # in seconds: the combined file plays at 60 bpm, one beat a second
    for notes, tempo, _ in prepared:
        sec = notes.astype(np.float64)
        sec[:, [COL["onset"], COL["duration"]]] *= 60.0 / tempo
        length = float((sec[:, COL["onset"]] + sec[:, COL["duration"]]).max()) if len(sec) else 0.0
        sec[:, COL["onset"]] += at
        rows.append(sec)
        spans.append((at, sec))
        at += length + _TAIL_S + 1.0 if len(sec) else 0.0
    try:
        audio = _fluidsynth(np.concatenate(rows).astype(np.float32), 60.0, (4, 4), sr, exe, soundfont)
    except _FAILURES:
        return [render_notes_named(n, tempo, ts, sr) for n, tempo, ts in prepared]
    name, out = _name(exe, soundfont), []
    for start, sec in spans:
        if not len(sec):
            out.append((np.zeros((2, 0), np.float32), _EMPTY))
            continue
        lo = int(round(start * sr))
        local = sec.copy()
        local[:, COL["onset"]] -= start
        length = float((local[:, COL["onset"]] + local[:, COL["duration"]]).max())
        window = audio[:, lo : lo + int((length + _TAIL_S) * sr) + 1]  # the next example starts 1 s later
        out.append((_stereo(_trim_tail(window, local, 60.0, sr)), name))
    return out


def render_notes(rows: np.ndarray, tempo_bpm: float = 120.0, time_signature: Sequence[int] = (4, 4),
                 sample_rate: int = RENDER_RATE) -> np.ndarray:
    """The notes of one example (rows of a notes table) as float32 audio `[2, S]` at `sample_rate`."""
    audio, name = render_notes_named(rows, tempo_bpm, time_signature, sample_rate)
    _last[:] = [name]
    return audio


def renderer_name() -> str:
    """The renderer the last `render_notes` used (before any: the one that would run)."""
    if _last:
        return _last[0]
    soundfont, why = find_soundfont()
    if find_fluidsynth() is None:
        return "additive fallback (no fluidsynth on PATH)"
    return f"fluidsynth · {soundfont.name}" if soundfont else f"additive fallback ({why})"


def _trim_tail(audio: np.ndarray, notes: np.ndarray, tempo: float, sample_rate: int) -> np.ndarray:
    """FluidSynth plays on until every voice has died away (seconds of reverb after a held chord):
    keep the notes, then at most `_TAIL_S` of what rings on above -60 dBFS."""
    end = int(float((notes[:, COL["onset"]] + notes[:, COL["duration"]]).max()) * 60.0 / tempo * sample_rate)
    loud = np.flatnonzero(np.abs(audio).max(axis=0) > 1e-3)
    ring = int(loud[-1]) + 1 if len(loud) else 0
    return audio[:, : min(audio.shape[1], max(end, min(ring, end + int(_TAIL_S * sample_rate))))]


def _stereo(audio: np.ndarray) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float32)
    return np.repeat(audio, 2, axis=0) if audio.shape[0] == 1 else audio[:2]
