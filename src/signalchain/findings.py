"""`Finding`: the one record every check returns, and its JSON form (DESIGN §4)."""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .errors import SignalchainError

__all__ = [
    "Severity",
    "Finding",
    "jsonable",
    "exit_code",
    "check_failed",
    "sort_findings",
]


class Severity(str, Enum):
    """How bad a finding is. `error`: the run is broken; `warning`: likely wrong; `info`: context."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]

    @classmethod
    def parse(cls, value: Severity | str) -> Severity:
        if isinstance(value, Severity):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise SignalchainError(
                f"unknown severity {value!r}; allowed: 'error', 'warning', 'info'"
            ) from None


def jsonable(value: Any) -> Any:
    """Turn numpy/torch scalars, tuples and non-finite floats into plain JSON values.

    Non-finite floats become the strings "nan", "inf", "-inf" so that the output is strict JSON.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    # numpy / torch scalars and arrays, without importing either.
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    return str(value)


@dataclass(frozen=True)
class Finding:
    """One verdict with its evidence. `stage` is the earliest stage where the problem shows."""

    id: str
    severity: Severity
    stage: str | None
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    hint: str = ""
    check: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", Severity.parse(self.severity))
        object.__setattr__(self, "evidence", jsonable(dict(self.evidence)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "stage": self.stage,
            "message": self.message,
            "evidence": self.evidence,
            "hint": self.hint,
            "check": self.check,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        missing = [k for k in ("id", "severity", "message") if k not in data]
        if missing:
            raise SignalchainError(
                f"finding {dict(data)!r} lacks {missing}; a finding needs id, severity and message"
            )
        return cls(
            id=str(data["id"]),
            severity=Severity.parse(data["severity"]),
            stage=data.get("stage"),
            message=str(data["message"]),
            evidence=dict(data.get("evidence") or {}),
            hint=str(data.get("hint") or ""),
            check=str(data.get("check") or ""),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Finding:
        return cls.from_dict(json.loads(text))


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable otherwise."""
    return sorted(findings, key=lambda f: f.severity.rank)


def exit_code(findings: Iterable[Finding]) -> int:
    """DESIGN §5: 1 when any finding is an error, else 0."""
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def check_failed(check: str, exc: BaseException, stage: str | None = None) -> Finding:
    """The finding that replaces a check which crashed: the report goes on without it.

    A warning, never an error (DESIGN §4): a crash of ours is no evidence about the user's run, so it
    never changes the exit code; what the check would have judged is simply not judged."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Finding(
        id="internal.check_failed",
        severity=Severity.WARNING,
        stage=stage,
        message=f"check {check} crashed: {type(exc).__name__}: {exc}; what it judges was not judged "
                "(a signalchain bug, not a verdict on your run)",
        evidence={"exception": type(exc).__name__, "traceback": tb[-4000:]},
        hint="please report it (with the traceback in this finding's evidence) at signalchain's issue tracker; "
             "every other finding stands",
        check=check,
    )
