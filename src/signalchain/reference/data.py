"""Seeded captioned music clips whose captions truly describe the audio, and an AudioCraft writer.

Every clip is drawn from a numpy Generator seeded by (seed, index), so clip i is the same on every
machine and every call, and any clip can be made without making the ones before it. The caption is
a fixed template over a finite vocabulary (`caption_vocabulary()`), so a small model can learn to
follow it and a check can tell a caption that matches its audio from one that does not.

    "fast bright square lead playing a rising arpeggio in a minor, high register, loud, with drums"
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from .synth import INSTRUMENTS, drum_track, midi_to_hz, render_note

# ---- the attribute space and the words that name it ------------------------------------------

TEMPOS = {"slow": (70, 90), "medium": (100, 120), "fast": (135, 160)}  # bpm ranges, inclusive
TEMPO_WORDS = {"slow": "slow", "medium": "medium tempo", "fast": "fast"}
INSTRUMENT_WORDS = {"organ": "warm organ", "square_lead": "bright square lead",
                    "plucked_string": "plucked string", "fm_bell": "ringing fm bell"}
PATTERN_WORDS = {"rising_arpeggio": "a rising arpeggio", "falling_arpeggio": "a falling arpeggio",
                 "scale_run": "a scale run", "ostinato": "a repeated note ostinato",
                 "wide_leaps": "wide leaps"}
# Scale degrees (0 = root, 7 = root an octave up), looped for the whole clip.
PATTERN_DEGREES = {"rising_arpeggio": [0, 2, 4, 7], "falling_arpeggio": [7, 4, 2, 0],
                   "scale_run": [0, 1, 2, 3, 4, 5, 6, 7, 6, 5, 4, 3, 2, 1], "ostinato": [0],
                   "wide_leaps": [0, 9, 2, 11, 4, 7]}
REGISTER_BASE_MIDI = {"low": 36, "mid": 54, "high": 72}  # the root lies in [base, base + 11]
DYNAMICS_DBFS = {"soft": -24.0, "loud": -10.0}  # target RMS over the whole clip
MODES = {"major": [0, 2, 4, 5, 7, 9, 11], "minor": [0, 2, 3, 5, 7, 8, 10]}
PITCH_CLASSES = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"]
GENRES = {"organ": "classical", "square_lead": "electronic", "plucked_string": "folk",
          "fm_bell": "ambient"}
SECONDS_RANGE = (1.5, 8.0)  # some clips are shorter than the 2 s crop: padding is real


def _key_words(pitch_class: str) -> str:
    return pitch_class[0].lower() + (" sharp" if pitch_class.endswith("#") else "")


def caption_vocabulary() -> list[str]:
    """Every word a caption can contain, lower case, first-use order of the template below."""
    phrases = [*TEMPO_WORDS.values(), *INSTRUMENT_WORDS.values(), "playing",
               *PATTERN_WORDS.values(), "in", *(_key_words(p) for p in PITCH_CLASSES), *MODES,
               *REGISTER_BASE_MIDI, "register", *DYNAMICS_DBFS, "with without drums"]
    return list(dict.fromkeys(w for phrase in phrases for w in phrase.split()))


def caption_words(caption: str) -> list[str]:
    """The words of a caption: commas dropped, split on spaces."""
    return caption.replace(",", " ").split()


def make_caption(a: Mapping[str, Any]) -> str:
    drums = "with drums" if a["drums"] else "without drums"
    return (f"{TEMPO_WORDS[a['tempo']]} {INSTRUMENT_WORDS[a['instrument']]} playing "
            f"{PATTERN_WORDS[a['pattern']]} in {_key_words(a['key_root'])} {a['mode']}, "
            f"{a['register']} register, {a['dynamics']}, {drums}")


# ---- sampling attributes ----------------------------------------------------------------------

_CHOICES: dict[str, tuple[Any, ...]] = {
    "tempo": tuple(TEMPOS), "key_root": tuple(PITCH_CLASSES), "mode": tuple(MODES),
    "instrument": INSTRUMENTS, "pattern": tuple(PATTERN_WORDS),
    "register": tuple(REGISTER_BASE_MIDI),
    "dynamics": tuple(DYNAMICS_DBFS), "drums": (False, True), "channels": (1, 2),
}


def sample_attributes(rng: np.random.Generator, overrides: Mapping[str, Any] | None = None
                      ) -> dict[str, Any]:
    """Draw every attribute, then apply overrides. All draws happen first, in a fixed order, so
    overriding one attribute leaves the others (and the rest of the random stream) unchanged."""
    a: dict[str, Any] = {name: options[int(rng.integers(len(options)))]
                         for name, options in _CHOICES.items()}
    tempo_position = float(rng.uniform())  # where in its tempo's bpm range the clip sits
    a["bpm"] = 0  # set below, once the tempo is final
    a["seconds"] = round(float(rng.uniform(*SECONDS_RANGE)), 2)
    a["pan"] = round(float(rng.uniform(-0.5, 0.5)), 3)  # used only by stereo clips
    a["level_jitter_db"] = round(float(rng.uniform(-1.0, 1.0)), 2)
    for name, value in (overrides or {}).items():
        if name not in a:
            raise ValueError(f"unknown attribute {name!r}; expected one of {sorted(a)}")
        if name in _CHOICES and value not in _CHOICES[name]:
            raise ValueError(f"attribute {name}={value!r} is not one of {list(_CHOICES[name])}")
        a[name] = value
    if "bpm" not in (overrides or {}):
        lo, hi = TEMPOS[a["tempo"]]
        a["bpm"] = lo + int(round(tempo_position * (hi - lo)))
    return a


# ---- rendering ------------------------------------------------------------------------------


def _soft_limit(x: np.ndarray, knee: float = 0.5, ceiling: float = 0.95) -> np.ndarray:
    """Identity below the knee, tanh above it: peaks approach but never reach the ceiling."""
    over = np.abs(x) > knee
    if not over.any():
        return x
    y = x.copy()
    peaks = x[over]  # only the few samples above the knee pay for the tanh
    y[over] = np.sign(peaks) * (knee + (ceiling - knee) * np.tanh((np.abs(peaks) - knee)
                                                                  / (ceiling - knee)))
    return y


def _set_loudness(x: np.ndarray, target_dbfs: float) -> np.ndarray:
    """Scale to the target RMS; loud clips with sharp peaks go through the soft limiter, which
    costs a little RMS, so rescale and limit again a few times."""
    target = 10.0 ** (target_dbfs / 20.0)
    for _ in range(3):
        x = x * (target / max(float(np.sqrt(np.mean(x**2))), 1e-12))
        if float(np.abs(x).max()) <= 0.5:  # below the limiter's knee: nothing more to do
            return x
        x = _soft_limit(x)
    return x


def _delay(x: np.ndarray, samples: int) -> np.ndarray:
    samples = min(samples, x.shape[0])
    return np.concatenate([np.zeros(samples), x[: x.shape[0] - samples]])


def render(a: Mapping[str, Any], sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """Attributes -> audio float32 [C, T]."""
    n = int(round(a["seconds"] * sample_rate))
    beat = 60.0 / a["bpm"]
    step = beat / 2.0  # eighth notes for every pattern, so the note rate follows the tempo
    start = min(int(rng.uniform(0.0, 0.15) * sample_rate), n // 4)  # a short lead-in of silence
    scale = MODES[a["mode"]]
    base = REGISTER_BASE_MIDI[a["register"]]
    root = base + (PITCH_CLASSES.index(a["key_root"]) - base) % 12
    degrees = PATTERN_DEGREES[a["pattern"]]

    melody = np.zeros(n)
    note_len = int(0.9 * step * sample_rate)  # the last 10 % of each step is silence
    for i in range(max(1, int((n - start) / (step * sample_rate)))):  # >= 1 note, however short
        at = start + int(round(i * step * sample_rate))
        d = degrees[i % len(degrees)]
        midi = root + 12 * (d // 7) + scale[d % 7]
        length = min(note_len, n - at)
        melody[at : at + length] += render_note(a["instrument"], float(midi_to_hz(midi)), length,
                                                sample_rate, rng)
    melody /= max(float(np.sqrt(np.mean(melody**2))), 1e-12)

    if a["channels"] == 2:
        # Constant-power pan plus two different short echoes: correlated, never identical.
        theta = (a["pan"] + 1.0) * np.pi / 4.0
        d1, d2 = int(0.007 * sample_rate), int(0.013 * sample_rate)
        channels = [np.cos(theta) * melody + 0.3 * _delay(melody, d1),
                    np.sin(theta) * melody + 0.3 * _delay(melody, d2)]
    else:
        channels = [melody]
    audio = np.stack(channels)  # [C, T]
    if a["drums"]:
        drums = drum_track(n, sample_rate, beat, start, rng)
        audio = audio + 0.6 * drums / max(float(np.sqrt(np.mean(drums**2))), 1e-12)

    audio = _set_loudness(audio, DYNAMICS_DBFS[a["dynamics"]] + a["level_jitter_db"])
    fade = min(n, int(0.01 * sample_rate))  # no click where the clip is cut
    audio[:, n - fade :] *= np.linspace(1.0, 0.0, fade)
    return audio.astype(np.float32)


# ---- clips ----------------------------------------------------------------------------------


@dataclass
class Clip:
    audio: np.ndarray  # float32 [C, T]
    sample_rate: int
    caption: str
    metadata: dict[str, Any]  # AudioCraft MusicInfo fields + source_id
    attributes: dict[str, Any]  # what was drawn; the caption and metadata are made from it
    source_id: str


def source_id(index: int, seed: int = 0) -> str:
    """Stable id of clip (index, seed); seed 0 keeps the short form "ref-000123"."""
    return f"ref-{index:06d}" if seed == 0 else f"ref-s{seed}-{index:06d}"


def make_metadata(a: Mapping[str, Any], index: int, seed: int) -> dict[str, Any]:
    sid = source_id(index, seed)
    moods = ["happy" if a["mode"] == "major" else "melancholic",
             "energetic" if a["dynamics"] == "loud" else "calm"]
    keywords = [a["tempo"], a["instrument"].replace("_", " "), a["pattern"].replace("_", " "),
                f"{a['register']} register", a["dynamics"], "drums" if a["drums"] else "no drums",
                "stereo" if a["channels"] == 2 else "mono"]
    return {"title": f"Reference clip {index}", "artist": "signalchain reference",
            "key": f"{a['key_root']} {a['mode']}", "bpm": a["bpm"],
            "genre": GENRES[a["instrument"]], "moods": moods,
            "instrument": a["instrument"].replace("_", " "), "description": make_caption(a),
            "keywords": keywords, "name": sid, "source_id": sid}


def generate_clip(index: int, seed: int = 0, sample_rate: int = 32000,
                  seconds: float | None = None,
                  attributes: Mapping[str, Any] | None = None) -> Clip:
    """Clip `index` of the collection `seed`; deterministic in (index, seed, sample_rate).

    `seconds` overrides the drawn length; `attributes` overrides drawn attributes by name (e.g.
    {"register": "low"}) so tests and experiments can vary one attribute and keep the rest.
    """
    if index < 0 or seed < 0:
        raise ValueError(f"index and seed must be >= 0, got index={index}, seed={seed}")
    if seconds is not None and not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    rng = np.random.default_rng([seed, index])
    overrides = dict(attributes or {})
    if seconds is not None:
        overrides["seconds"] = float(seconds)
    a = sample_attributes(rng, overrides)
    audio = render(a, sample_rate, rng)
    meta = make_metadata(a, index, seed)
    return Clip(audio=audio, sample_rate=sample_rate, caption=meta["description"], metadata=meta,
                attributes=dict(a), source_id=meta["source_id"])


#: Clips this process has rendered, by (index, collection seed, sample rate). A clip is a pure
#: function of those three, so every pipeline built in one process (a catalogue worker builds one per
#: fault, a test session dozens) renders each clip once. Stored read-only; callers get copies.
_RENDERED: dict[tuple[int, int, int], Clip] = {}
_RENDERED_MAX = 2048  # about 1 MB a clip; the reference splits hold 576


def rendered_clip(index: int, seed: int = 0, sample_rate: int = 32000) -> Clip:
    """`generate_clip(index, seed, sample_rate)`, rendered once per process: a fresh copy each call
    (its audio, metadata and attributes are the caller's own: changing them changes no other copy)."""
    key = (int(index), int(seed), int(sample_rate))
    c = _RENDERED.get(key)
    if c is None:
        c = generate_clip(*key)
        c.audio.setflags(write=False)
        while len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.pop(next(iter(_RENDERED)))
        _RENDERED[key] = c
    return Clip(audio=c.audio.copy(), sample_rate=c.sample_rate, caption=c.caption,
                metadata=copy.deepcopy(c.metadata), attributes=copy.deepcopy(c.attributes), source_id=c.source_id)


PRERENDER_MIN = 8  # fewer missing clips than this render one by one (a pool costs more than it saves)


def prerender(indices: Iterable[int], seed: int = 0, sample_rate: int = 32000, workers: int | None = None) -> int:
    """Render into the process's cache, on `workers` threads (default: the cores this process may use,
    at most 4), the clips of `indices` not in it yet; returns how many were rendered.

    Numpy releases the GIL inside its array work, which is most of a render, so a listing of a few
    hundred clips (`splits()`) takes about half the time on 2 cores. Each clip is a pure function of
    its key, so the audio is bit-identical to a render one by one (tests/reference/test_data.py).
    """
    keys = [k for k in dict.fromkeys((int(i), int(seed), int(sample_rate)) for i in indices) if k not in _RENDERED]
    if workers is None:
        try:
            workers = min(4, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):  # not Linux
            workers = min(4, os.cpu_count() or 1)
    if len(keys) < PRERENDER_MIN or workers < 2:
        return 0
    with ThreadPoolExecutor(workers, thread_name_prefix="signalchain-render") as pool:
        for key, c in zip(keys, pool.map(lambda k: generate_clip(*k), keys)):  # stored by this thread only
            c.audio.setflags(write=False)
            while len(_RENDERED) >= _RENDERED_MAX:
                _RENDERED.pop(next(iter(_RENDERED)))
            _RENDERED[key] = c
    return len(keys)


def clip_attributes(index: int, seed: int = 0) -> dict[str, Any]:
    """The attributes `generate_clip(index, seed)` draws, without rendering any audio.

    What a manifest's metadata gives a data-selection script for free: a query over thousands of
    clips ("keep the organ clips") costs microseconds per clip instead of a render each.
    """
    if index < 0 or seed < 0:
        raise ValueError(f"index and seed must be >= 0, got index={index}, seed={seed}")
    return sample_attributes(np.random.default_rng([seed, index]))


def generate_clips(n: int, seed: int = 0, sample_rate: int = 32000, start: int = 0) -> list[Clip]:
    return [generate_clip(i, seed, sample_rate) for i in range(start, start + n)]


def write_audiocraft_dataset(clips: list[Clip], root: str | Path, *, subtype: str = "PCM_16",
                             relative_paths: bool = False) -> Path:
    """Write an AudioCraft music dataset and return the manifest path, root/data.jsonl.

    Layout: root/audio/<source_id>.wav, and beside it root/audio/<source_id>.json with the
    MusicInfo fields (AudioCraft's MusicDataset reads the sidecar at the wav's path with .json).
    Manifest lines are AudioMeta dicts: path, duration, sample_rate, amplitude, weight, info_path.
    Paths are absolute by default, as AudioCraft's own `find_audio_files` writes them; with
    relative_paths=True they are relative to root (portable, but the reader must resolve them).
    """
    root = Path(root).resolve()
    (root / "audio").mkdir(parents=True, exist_ok=True)
    lines = []
    for clip in clips:
        wav = root / "audio" / f"{clip.source_id}.wav"
        sf.write(wav, clip.audio.T, clip.sample_rate, subtype=subtype)  # soundfile wants [T, C]
        frames = clip.audio.shape[-1]
        sidecar = {**clip.metadata, "duration": frames / clip.sample_rate,
                   "sample_rate": clip.sample_rate, "file_extension": "wav"}
        wav.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
        path = wav.relative_to(root).as_posix() if relative_paths else str(wav)
        lines.append(json.dumps({"path": path, "duration": frames / clip.sample_rate,
                                 "sample_rate": clip.sample_rate, "amplitude": None,
                                 "weight": None, "info_path": None}))
    manifest = root / "data.jsonl"
    tmp = manifest.with_name(manifest.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, manifest)  # atomic: a crash leaves the previous manifest, never half of one
    return manifest
