"""What the tokenizer drops: REMI built from the wrong settings, or handed another vocabulary's ids.

Each fault here is a tokenizer config that disagrees with the data (tempos, meters, velocities,
durations, programs or pitches the vocabulary cannot say), or ids made with one vocabulary and
read with another. The notes going in (`midi.source`, `notes.augmented`) and the notes decoded back
from the tokens (`notes.decoded`) then disagree: the round trip names the token type responsible.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from signalchain.symbolic import COL

from .. import tokenizer as tk
from ._registry import fault

if TYPE_CHECKING:
    from ..data import Piece
    from ..pipeline import SymbolicBedPipeline

FAMILY = "symbolic"
SECTION = "Inspect data before tuning the optimiser"


def _retokenize(p: SymbolicBedPipeline, **settings: Any) -> None:
    """The tokenizer the run really builds: the bed's settings with `settings` changed."""
    p.tokenizer = tk.build_remi(replace(p.cfg.tokenizer, **settings))


@fault("vocab_changed_after_cache", FAMILY, "the tokenizer's vocabulary changed between caching and training",
       SECTION, ["symbolic.round_trip", "symbolic.structure"], "tokens")
def _vocab_changed_after_cache(p: SymbolicBedPipeline) -> None:
    # Bug: the token cache was written while the tokenizer still had miditok's 4-bin velocity
    # setting from the prototype; the config was moved to 8 bins afterwards and the cache kept
    # (its key is the file list, not the tokenizer). Training reads the old ids and decodes them with
    # the new vocabulary: every id past the Velocity block is off by four (Durations read as
    # Velocities, Positions as Durations, ...).
    cached_with = tk.build_remi(replace(p.cfg.tokenizer, num_velocities=4))
    p.encode = lambda window: tk.encode_notes(cached_with, window.notes, window.tempo,  # type: ignore[method-assign]
                                              window.time_signature)


@fault("tokenizer_drops_tempo", FAMILY, "a tempo that the tokenizer drops", SECTION,
       ["symbolic.round_trip"], "tokens", symptom="ignores-caption")
def _tokenizer_drops_tempo(p: SymbolicBedPipeline) -> None:
    # Bug: the tokenizer config was copied from a piano-transcription recipe, which sets
    # `use_tempos=False` (its MIDI is all at 120 bpm). Every piece decodes at miditok's default
    # tempo, whatever its caption says ("adagio 60 bpm").
    _retokenize(p, use_tempos=False)


@fault("tokenizer_drops_time_signature", FAMILY, "a time signature that the tokenizer drops", SECTION,
       ["symbolic.round_trip"], "tokens", symptom="ignores-caption")
def _tokenizer_drops_time_signature(p: SymbolicBedPipeline) -> None:
    # Bug: the `time_signature_range` of a pop-music config ({4: [4]}: 4/4 only) is kept: miditok
    # drops every other meter, so the 3/4 chorales and the 6/8 jigs are cut into 4/4 bars.
    _retokenize(p, time_signatures={4: [4]})


@fault("velocity_one_bin", FAMILY, "velocities quantised to one bin", SECTION,
       ["symbolic.round_trip", "symbolic.collapsed"], "tokens")
def _velocity_one_bin(p: SymbolicBedPipeline) -> None:
    # Bug: "we do not model dynamics" was written as `num_velocities=1` instead of
    # `use_velocities=False`: every note is stored (and decoded) at velocity 127, fortissimo.
    _retokenize(p, num_velocities=1)


@fault("velocity_hardcoded_in_export", FAMILY, "velocities quantised to one bin", SECTION,
       ["symbolic.collapsed", "symbolic.round_trip"], "tokens")
def _velocity_hardcoded_in_export(p: SymbolicBedPipeline) -> None:
    def encode(window: Piece) -> list[int]:
        # Bug: the notes -> Score helper was written from a snippet that builds each note as
        # `Note(time, duration, pitch, velocity=100)`: the velocity column never reaches the MIDI,
        # and every note is tokenized in the same velocity bin.
        notes = window.notes.copy()
        notes[:, COL["velocity"]] = 100
        return tk.encode_notes(p.tokenizer, notes, window.tempo, window.time_signature)

    p.encode = encode  # type: ignore[method-assign]


@fault("durations_only_for_drums", FAMILY, "durations quantised to one bin", SECTION,
       ["symbolic.round_trip", "symbolic.collapsed"], "tokens")
def _durations_only_for_drums(p: SymbolicBedPipeline) -> None:
    # Bug: meant "no Duration tokens for drum hits" (their length means nothing), written as the
    # list of programs that KEEP durations: `use_note_duration_programs=[-1]` (drums only). Every
    # pitched note decodes at miditok's default duration, half a beat.
    from miditok import REMI

    tokenizer = tk.build_remi(p.cfg.tokenizer)
    config = tokenizer.config
    config.use_note_duration_programs = {-1}
    p.tokenizer = REMI(config)


@fault("programs_merged_in_export", FAMILY, "a program or instrument lost", SECTION,
       ["symbolic.collapsed", "symbolic.round_trip"], "tokens", symptom="ignores-caption")
def _programs_merged_in_export(p: SymbolicBedPipeline) -> None:
    def encode(window: Piece) -> list[int]:
        # Bug: the notes -> MIDI helper keys its tracks by `is_drum` alone (one drum track, one
        # pitched track) and creates the pitched one with the Track's default program, 0: "strings
        # and organ" are tokenized (and learnt) as one piano.
        notes = window.notes.copy()
        notes[notes[:, COL["drum"]] == 0, COL["program"]] = 0
        return tk.encode_notes(p.tokenizer, notes, window.tempo, window.time_signature)

    p.encode = encode  # type: ignore[method-assign]


@fault("program_not_in_tokenizer", FAMILY, "an instrument the tokenizer's program list does not hold", SECTION,
       ["symbolic.round_trip", "symbolic.empty"], "tokens", symptom="ignores-caption")
def _program_not_in_tokenizer(p: SymbolicBedPipeline) -> None:
    # Bug: the tokenizer's `programs` list comes from a string-quartet project (violin, viola,
    # cello, contrabass: 40-43, and drums): miditok silently drops the tracks of any other program,
    # here the bed's choir, organ, ensemble strings, brass and woodwinds.
    from miditok import REMI

    config = tk.build_remi(p.cfg.tokenizer).config
    config.programs = {-1, 40, 41, 42, 43}
    p.tokenizer = REMI(config)


@fault("pitch_range_from_piano_config", FAMILY, "pitches outside the tokenizer's range are dropped", SECTION,
       ["symbolic.round_trip"], "tokens")
def _pitch_range_from_piano_config(p: SymbolicBedPipeline) -> None:
    # Bug: the `pitch_range` of a right-hand melody model (C4-C7, 60-96) is reused: the bass and
    # tenor lines of the chorales are dropped by the tokenizer without a warning.
    from miditok import REMI

    config = tk.build_remi(p.cfg.tokenizer).config
    config.pitch_range = (60, 97)
    p.tokenizer = REMI(config)

