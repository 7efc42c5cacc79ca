"""The HF bed: a tiny offline Hugging Face MusicGen fine-tuned through `signalchain.integrations.hf_musicgen`."""

from .pipeline import HFBedConfig, HFBedPipeline

__all__ = ["HFBedConfig", "HFBedPipeline"]
