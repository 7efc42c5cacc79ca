"""What `signalchain.doctor`, `audit`, `listen`, `compare` and `capture` return: one `Report` each.

A report holds the findings and the measurements its command made. It says its verdict in a few
lines (`str()`), writes the JSON the command line's `--json` writes (`to_json()`) and the page its
`--html` writes (`to_html(path)`). A report only renders what was measured: the verdict is the
findings' (DESIGN §1: report never judges).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._atomic import write_text_atomic
from ..findings import Finding, Severity
from ..report.jsonout import report_dict

if TYPE_CHECKING:
    from ..audit.run import AuditResult
    from ..experiments.doctor import DoctorResult
    from ..golden import Comparison
    from ..records.output import FileMeasurement
    from ..report.html import HtmlReport
    from ..trace import Trace

__all__ = ["Report", "DoctorReport", "AuditReport", "ListenReport", "CompareReport", "CaptureReport"]


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word == "info" else f"{n} {word}s"


def _finding_line(label: str, f: Finding) -> str:
    where = f" at {f.stage}" if f.stage else ""
    return f"{label}: {f.id}{where}: {f.message}"


class Report:
    """The findings of one command, with what it measured; the base of every result of the Python API.

    Attributes:
        findings: every `Finding`, in the order the command's JSON lists them.
        title: what the command line prints above its table (command · subject).

    `ok` is True when no finding is an error (the command line's exit status 0). `str(report)` gives
    the verdict, the counts, the first error (or warning) with its stage and numbers, then what ran.
    """

    #: The command whose JSON and page this report writes.
    command: str = ""
    #: Whether `str()` names the first error (or warning): off where the report's own lines say it better.
    _name_first: bool = True

    def __init__(self, findings: Sequence[Finding], *, title: str, fields: Mapping[str, Any],
                 page: Callable[[], HtmlReport], lines: Sequence[str] = ()):
        self.findings: list[Finding] = list(findings)
        self.title = title
        self._fields = dict(fields)
        self._page = page
        self._lines = list(lines)

    @property
    def errors(self) -> list[Finding]:
        """The findings of severity error: the run is broken."""
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        """The findings of severity warning: likely wrong."""
        return [f for f in self.findings if f.severity is Severity.WARNING]

    @property
    def ok(self) -> bool:
        """No error finding (the command line would exit 0)."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """The report as the command line's `--json` writes it: `{"signalchain": version, "findings": [...], ...}`."""
        return report_dict(self.findings, **self._fields)

    def to_json(self, path: str | Path | None = None) -> str:
        """The `--json` report as text (strict JSON); also written to `path`, atomically, when given."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
        if path is not None:
            write_text_atomic(Path(path), text)
        return text

    def to_html(self, path: str | Path) -> Path:
        """Write the self-contained page the command line's `--html` writes; returns its path."""
        return self._page().write(path)

    def verdict(self) -> str:
        """'ok' or 'not ok', then the counts: '2 errors, 1 warning, 3 info'."""
        infos = sum(f.severity is Severity.INFO for f in self.findings)
        counts = [_count(len(self.errors), "error"), _count(len(self.warnings), "warning"), _count(infos, "info")]
        return f"{'ok' if self.ok else 'not ok'}: {', '.join(counts)}"

    def __str__(self) -> str:
        lines = [f"{self.title} — {self.verdict()}"]
        first = (self.errors or self.warnings or [None])[0]
        if first is not None and self._name_first:
            lines.append(_finding_line(f"first {first.severity.value}", first))
            if first.hint:
                lines.append(f"  next: {first.hint}")
        return "\n".join(lines + self._lines)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.title}: {self.verdict()}>"


class DoctorReport(Report):
    """What `signalchain.doctor` found: the families run, their findings, measurements and timings.

    Attributes (beside `Report`'s): `pipeline` (the spec, or the object's name, that ran), `name`
    (the pipeline's name), `families` (run, in order), `unavailable` (asked for, not in this version),
    `seconds`, `timings` (seconds per family and step), `metrics` (what the page draws), `result`
    (the doctor's own `DoctorResult`).
    """

    command = "doctor"

    def __init__(self, result: DoctorResult, *, pipeline: str, name: str, fields: Mapping[str, Any],
                 page: Callable[[], HtmlReport]):
        ran = f"families run: {', '.join(result.families)} in {result.seconds:.1f} s" + (
            f"; not available yet: {', '.join(result.unavailable)}" if result.unavailable else "")
        super().__init__(result.findings, title=f"doctor · {name} · {', '.join(result.families)}", fields=fields,
                         page=page, lines=[ran])
        self.result = result
        self.pipeline, self.name = pipeline, name
        self.families, self.unavailable = list(result.families), list(result.unavailable)
        self.seconds, self.timings, self.metrics = result.seconds, result.timings, result.metrics


class AuditReport(Report):
    """What `signalchain.audit` found in a dataset and its splits (audio, or MIDI when `midi`).

    Attributes: `files` (one record per example), `splits` (per-split statistics), `matches` (copies
    and near-copies across splits), `sources` (what each path was read as), `midi`, `result` (the
    audit's own `AuditResult`).
    """

    command = "audit"

    def __init__(self, result: AuditResult, *, midi: bool, fields: Mapping[str, Any], page: Callable[[], HtmlReport]):
        what = "MIDI files" if midi else "examples"
        done = f"{_count(len(result.files), what[:-1])} in {result.timings.get('total', 0.0):.1f} s" + (
            f", {len(result.matches)} flagged pairs across splits" if result.matches else "")
        super().__init__(result.findings, title=f"audit · {_count(len(result.files), what[:-1])}", fields=fields,
                         page=page, lines=[done])
        self.result, self.midi = result, midi
        self.files, self.splits, self.matches = result.files, result.splits, result.matches
        self.sources = result.sources


class ListenReport(Report):
    """What `signalchain.listen` found in written audio files.

    Attributes: `files` (a `FileMeasurement` per file read: rate, subtype, level, silence, clipping…),
    `expected_rate`, `expected_subtype`.
    """

    command = "listen"

    def __init__(self, findings: Sequence[Finding], files: Sequence[FileMeasurement], *, expected_rate: int | None,
                 expected_subtype: str | None, fields: Mapping[str, Any], page: Callable[[], HtmlReport]):
        super().__init__(findings, title=f"listen · {_count(len(files), 'file')}", fields=fields, page=page)
        self.files = list(files)
        self.expected_rate, self.expected_subtype = expected_rate, expected_subtype


class CompareReport(Report):
    """A golden batch compared with a fresh run of a pipeline, or with a second golden.

    Attributes: `comparison` (the stage-by-stage `Comparison`; `str()` of it names the first divergent
    stage), `identical`, `first_divergence` (a `StageDiff` or None), `golden` (its folder), `new`
    (what it was compared with), `pipeline` (spec, source and seed of the re-run; None for two goldens).
    """

    command = "compare"
    _name_first = False  # the comparison's own lines name the first divergent stage, with more numbers

    def __init__(self, comparison: Comparison, findings: Sequence[Finding], *, golden: str, new: str,
                 pipeline: dict[str, Any] | None, fields: Mapping[str, Any], page: Callable[[], HtmlReport],
                 notes: Sequence[str] = ()):
        super().__init__(findings, title=f"compare · {golden} vs {new}", fields=fields, page=page,
                         lines=[*notes, *str(comparison).splitlines()])
        self.comparison, self.golden, self.new, self.pipeline = comparison, golden, new, pipeline

    @property
    def identical(self) -> bool:
        """Every stage matches the golden batch."""
        return self.comparison.identical

    @property
    def first_divergence(self) -> Any:
        """The earliest stage that differs (a `StageDiff`), or None."""
        return self.comparison.first_divergence


class CaptureReport(Report):
    """A golden batch recorded by `signalchain.capture`: `path` (its folder) and `trace` (the stages recorded)."""

    command = "capture"

    def __init__(self, trace: Trace, path: Path, *, name: str, fields: Mapping[str, Any],
                 page: Callable[[], HtmlReport]):
        super().__init__(list(trace.problems), title=f"capture · {name} → {path}", fields=fields, page=page,
                         lines=[f"saved {len(trace)} stages to {path}"])
        self.trace, self.path = trace, path
