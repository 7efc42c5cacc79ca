"""Layer 3: live, cheap, in-loop measurements and triggers."""

from .distributed import RankWatch
from .monitor import Monitor, NonFiniteError

__all__ = ["Monitor", "NonFiniteError", "RankWatch"]
