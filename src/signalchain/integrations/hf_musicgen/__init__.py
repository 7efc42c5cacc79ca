"""Hugging Face `transformers` MusicGen as a signalchain `Pipeline` (extra `[hf]`)."""

from .data import Example, examples_from_clips, examples_from_dataset, read_examples
from .labels import delayed_codes, delays, labels_from_pattern
from .load import from_pretrained_dir, parse_settings
from .pipeline import Batch, HFMusicgenPipeline

__all__ = ["Batch", "Example", "HFMusicgenPipeline", "delayed_codes", "delays", "examples_from_clips",
           "examples_from_dataset", "from_pretrained_dir", "labels_from_pattern", "parse_settings", "read_examples"]
