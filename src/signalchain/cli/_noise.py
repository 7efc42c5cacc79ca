"""Libraries' chatter during a command, held back: Python warnings (numpy's RuntimeWarning, torch's and
transformers' UserWarnings…) and the transformers logger's warnings are counted, not printed, and
one line says how many were hidden; `--debug` lets them through as they come.

The transformers logger is caught without importing transformers (seconds at start-up): its library
logger is created here if it does not exist yet, and every handler it gets while the capture lasts
(transformers adds its own on first use) is given the counting filter.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import MethodType
from typing import Any

__all__ = ["LibraryNoise", "hold_library_noise", "LOGGERS"]

LOGGERS = ("transformers",)  # library loggers whose warnings are held back


class LibraryNoise:
    """What was held back: counts by kind ("RuntimeWarning", "transformers"), and the first few texts."""

    KEEP = 20

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: list[str] = []

    def add(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        if len(self.first) < self.KEEP:
            self.first.append(f"{kind}: {text}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line: '3 library warnings hidden (RuntimeWarning ×2, transformers ×1); --debug shows them'."""
        n = self.total
        kinds = ", ".join(f"{k} ×{v}" for k, v in self.counts.most_common())
        return f"{n} library warning{'' if n == 1 else 's'} hidden ({kinds}); --debug shows them"


class _Hold(logging.Filter):
    def __init__(self, noise: LibraryNoise, name: str):
        super().__init__()
        self.noise, self.kind = noise, name

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True  # a library's error is not chatter
        if getattr(record, "_signalchain_held", False):
            return False  # counted at the logger's first handler already
        record._signalchain_held = True
        self.noise.add(self.kind, record.getMessage().splitlines()[0] if record.getMessage() else "")
        return False


@contextmanager
def hold_library_noise() -> Iterator[LibraryNoise]:
    """Count (and hide) warnings and library log warnings raised inside the block."""
    noise = LibraryNoise()
    patched: list[tuple[logging.Logger, list[logging.Handler], _Hold]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        hold = _Hold(noise, name)
        handlers = list(logger.handlers)
        for h in handlers:
            h.addFilter(hold)
        original = logger.addHandler

        def add_handler(self: logging.Logger, handler: logging.Handler, _hold: _Hold = hold,
                        _handlers: list[logging.Handler] = handlers, _original: Any = original) -> None:
            handler.addFilter(_hold)
            _handlers.append(handler)
            _original(handler)

        logger.addHandler = MethodType(add_handler, logger)  # type: ignore[method-assign]
        patched.append((logger, handlers, hold))

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        noise.add(category.__name__, f"{message} ({filename}:{lineno})")

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield noise
    finally:
        for logger, handlers, hold in patched:
            logger.__dict__.pop("addHandler", None)
            for h in handlers:
                h.removeFilter(hold)
