"""The symbolic bed: a tiny caption-conditioned REMI transformer over music21's corpus, trained on CPU."""

from .pipeline import SymBatch, SymbolicBedConfig, SymbolicBedPipeline

__all__ = ["SymBatch", "SymbolicBedConfig", "SymbolicBedPipeline"]
