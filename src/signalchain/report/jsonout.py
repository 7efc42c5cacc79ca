"""The machine-readable report (DESIGN §5): `{"signalchain": version, "findings": [...], ...}`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._atomic import write_text_atomic
from .._version import __version__
from ..findings import Finding, jsonable

__all__ = ["report_dict", "write_json"]


def report_dict(findings: Sequence[Finding], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"signalchain": __version__, "findings": [f.to_dict() for f in findings]}
    out.update({k: jsonable(v) for k, v in extra.items()})
    return out


def write_json(path: str | Path, findings: Sequence[Finding], **extra: Any) -> Path:
    """The report to `path`, atomically; `-` is standard output (the human output went to stderr)."""
    text = json.dumps(report_dict(findings, **extra), indent=2, allow_nan=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return Path("-")
    path = Path(path)
    write_text_atomic(path, text)
    return path
