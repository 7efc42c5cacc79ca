"""What every check shares: a finding constructor and a runner that turns crashes into findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..findings import Finding, Severity, check_failed

__all__ = ["make", "run_check", "first_stage", "Rule"]


class Rule(NamedTuple):
    """One row of a judge's rules table: the finding ids the rule can make, the function that makes
    them, and whether the judge stops once it has fired (what follows would only repeat it)."""

    ids: tuple[str, ...]
    fn: Callable[..., Any]
    final: bool = False


def make(id: str, severity: str | Severity, stage: str | None, message: str, check: str,
         hint: str = "", **evidence: Any) -> Finding:
    """A finding, with evidence given as keyword arguments."""
    return Finding(id=id, severity=Severity.parse(severity), stage=stage, message=message,
                   evidence=evidence, hint=hint, check=check)


def run_check(name: str, fn: Callable[..., Iterable[Finding] | None], *args: Any, **kwargs: Any) -> list[Finding]:
    """Run one check; a crash becomes an `internal.check_failed` finding and the others go on."""
    try:
        return list(fn(*args, **kwargs) or [])
    except Exception as exc:  # deepchecks style: a crashing check is a record, not a crash
        return [check_failed(name, exc)]


def first_stage(stages: Iterable[str], order: list[str]) -> str | None:
    """The earliest of `stages` in `order` (a trace's stage names); unknown ones sort last."""
    rank = {n: i for i, n in enumerate(order)}
    found = sorted(stages, key=lambda s: rank.get(s, len(rank)))
    return found[0] if found else None
