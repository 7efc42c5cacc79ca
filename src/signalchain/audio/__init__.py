"""Layer 1: audio files and (later) fingerprints."""

from .io import AudioFile, join_examples, read_audio, write_audio

__all__ = ["AudioFile", "join_examples", "read_audio", "write_audio"]
