"""Findings of a live session: to the "signalchain" logger (one line each, as they are made) and to
`out_dir/findings.json` in the shape `signalchain doctor --json` writes, rewritten whole and
atomically whenever a finding arrives, so that a run killed at any moment leaves a readable file.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..findings import Finding, Severity, check_failed
from ..report.jsonout import write_json

__all__ = ["Reporting"]

CHECK = "integrations.live"
_LEVEL = {Severity.ERROR: logging.ERROR, Severity.WARNING: logging.WARNING, Severity.INFO: logging.INFO}


class Reporting:
    """The findings half of `LiveSession` (a mixin: the session sets these attributes)."""

    findings: list[Finding]
    out_dir: Path | None
    log: logging.Logger
    strict: bool
    rank: int
    source: str
    skipped_steps: int
    _lock: threading.RLock
    _said: set[tuple[str, str]]
    _closed: bool
    _step: int | None

    def _from_monitor(self, finding: Finding) -> None:
        """The Monitor counts its own steps; the evidence says the trainer's."""
        own = finding.evidence.get("step")
        if self._step is not None and own != self._step:
            evidence = {**finding.evidence, "monitor_step": own, "step": self._step}
            message = finding.message  # one numbering: a message opening with the Monitor's count says the trainer's
            if own is not None and message.startswith(f"step {own}:"):
                message = f"step {self._step}:" + message[len(f"step {own}:"):]
            finding = dataclasses.replace(finding, evidence=evidence, message=message)
        across = getattr(self, "_across_ranks", None)  # `Watching`'s: this rank's, shared, or with its origin
        for f in across(finding) if across is not None else [finding]:
            self._add(f)

    def _add(self, finding: Finding) -> None:
        """Record, log and write one finding. The same finding twice (a rank watch's hang verdict comes
        back as the watchdog's hook result too) is kept once; a stall the watchdog re-reports (it
        escalated) replaces its earlier self."""
        with self._lock:
            if any((f.id, f.stage, f.message) == (finding.id, finding.stage, finding.message) for f in self.findings):
                return
            episode = finding.evidence.get("episode") if finding.id == "perf.stall" else None
            same = [i for i, f in enumerate(self.findings) if episode is not None and f.id == "perf.stall"
                    and f.evidence.get("episode") == episode and f.evidence.get("pid") == finding.evidence.get("pid")]
            if same:
                self.findings[same[0]] = finding
            else:
                self.findings.append(finding)
        try:
            # the level is the severity and the logger's name says signalchain: neither is repeated (a
            # trainer's "%(levelname)s - %(name)s - %(message)s" read "ERROR - signalchain - signalchain: … [error]")
            own = self.log.name.split(".")[0] == "signalchain"
            self.log.log(_LEVEL.get(finding.severity, logging.WARNING), "%s%s @ %s: %s", "" if own else "signalchain ",
                         finding.id, finding.stage or "—", finding.message)
        except Exception:
            pass
        self._write()

    def _write(self) -> None:
        """findings.json, rewritten whole and atomically (rank r > 0: findings.rank<r>.json)."""
        if self.out_dir is None:
            return
        name = "findings.json" if self.rank == 0 else f"findings.rank{self.rank}.json"
        try:
            with self._lock:
                write_json(self.out_dir / name, list(self.findings), source=self.source, rank=self.rank,
                           skipped_steps=self.skipped_steps)
        except Exception as exc:  # a full disk must not end the run; the log still has every finding
            self.log.error("could not write %s: %s", self.out_dir / name, exc)

    def _internal(self, where: str, exc: BaseException) -> None:
        key = (where, f"{type(exc).__name__}: {exc}"[:200])
        if key in self._said:
            return
        self._said.add(key)
        f = check_failed(CHECK, exc)
        self._add(dataclasses.replace(f, evidence={**f.evidence, "hook": where, "step": self._step}))

    def _safely(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self._closed and not where.startswith("close"):  # a hook after close (an evaluation): nothing
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if self.strict:
                raise
            self._internal(where, exc)
            return None
