"""General MIDI's percussion key map (channel 10): on a drum track a pitch names an instrument."""

from __future__ import annotations

__all__ = ["GM_DRUMS", "drum_name"]

GM_DRUMS = {
    35: "acoustic bass drum", 36: "bass drum", 37: "side stick", 38: "acoustic snare", 39: "hand clap",
    40: "electric snare", 41: "low floor tom", 42: "closed hi-hat", 43: "high floor tom", 44: "pedal hi-hat",
    45: "low tom", 46: "open hi-hat", 47: "low-mid tom", 48: "hi-mid tom", 49: "crash cymbal 1",
    50: "high tom", 51: "ride cymbal 1", 52: "chinese cymbal", 53: "ride bell", 54: "tambourine",
    55: "splash cymbal", 56: "cowbell", 57: "crash cymbal 2", 58: "vibraslap", 59: "ride cymbal 2",
    60: "hi bongo", 61: "low bongo", 62: "mute hi conga", 63: "open hi conga", 64: "low conga",
    65: "high timbale", 66: "low timbale", 67: "high agogo", 68: "low agogo", 69: "cabasa", 70: "maracas",
    71: "short whistle", 72: "long whistle", 73: "short guiro", 74: "long guiro", 75: "claves",
    76: "hi wood block", 77: "low wood block", 78: "mute cuica", 79: "open cuica", 80: "mute triangle",
    81: "open triangle",
}


def drum_name(pitch: int) -> str:
    """`"38 acoustic snare"`; the bare number off the map."""
    name = GM_DRUMS.get(int(pitch))
    return f"{int(pitch)} {name}" if name else str(int(pitch))
