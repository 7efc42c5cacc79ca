"""Layer 3: bisect commits and checkpoints on the golden batch (issue 14)."""

from .search import SearchResult, Verdict, bisect_range

__all__ = ["SearchResult", "Verdict", "bisect_range"]
