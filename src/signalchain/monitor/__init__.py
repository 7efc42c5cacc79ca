"""Layer 3: live, cheap, in-loop measurements and triggers."""

from ._dist_check import CollectiveMismatch
from .distributed import RankWatch
from .monitor import Monitor, NonFiniteError

__all__ = ["CollectiveMismatch", "Monitor", "NonFiniteError", "RankWatch"]
