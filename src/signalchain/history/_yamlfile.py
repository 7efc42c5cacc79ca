"""Read a run's YAML configuration (Lightning's `hparams.yaml`, Hydra's `.hydra/config.yaml`) as plain
data: `yaml.safe_load` only, never Python objects; a missing PyYAML or a file that does not parse is a
note, and the file is listed among the run's sources either way."""

from __future__ import annotations

import os
from typing import Any

from ..records.history import ReadNote, RunHistory

__all__ = ["read_yaml"]


def read_yaml(path: str, run: RunHistory, unparsed: str) -> Any:
    """The document at `path`, or None (absent, PyYAML missing, or `unparsed: <error>` noted)."""
    if not os.path.isfile(path):
        return None
    try:
        import yaml
    except ImportError:
        run.notes.append(ReadNote(path, "not read: PyYAML is not installed"))
        return None
    run.sources.append(path)  # read even when it does not parse: the note names it
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except Exception as exc:
        run.notes.append(ReadNote(path, f"{unparsed}: {exc}"))
        return None
