"""The bundled reference text-to-music pipeline (a user of signalchain's public API) and its faults."""

from .config import RefConfig
from .pipeline import Batch, ReferencePipeline

__all__ = ["Batch", "RefConfig", "ReferencePipeline"]
