"""Hugging Face `transformers` MusicGen as a signalchain `Pipeline` (extra `[hf]`)."""

from .data import Example, examples_from_clips, examples_from_dataset, read_examples
from .labels import delayed_codes, delays, labels_from_pattern
from .pipeline import Batch, HFMusicgenPipeline

__all__ = ["Batch", "Example", "HFMusicgenPipeline", "delayed_codes", "delays", "examples_from_clips",
           "examples_from_dataset", "labels_from_pattern", "read_examples"]
