"""The verdict banner every page opens with: how many errors and warnings, and the first error.

A reader sees at the top, before any table or player, whether the run is broken ("1 error, 2
warnings") and where it first went wrong (the first error's id, stage and message). The banner is
coloured by the worst severity present. It counts what the page was given; it judges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from ..findings import Finding

__all__ = ["Verdict", "verdict_of", "verdict_banner", "BANNER_CSS"]

BANNER_CSS = """
.banner{border:1px solid;border-left-width:6px;border-radius:4px;padding:.5em .9em;margin:.6em 0 1em;font-size:1.02em}
.banner .counts{font-weight:700;margin-right:.6em}.banner .first{overflow-wrap:anywhere}.banner .scope{opacity:.75}
.banner-error{background:#fdecee;border-color:#b00020;color:#5c0010}
.banner-warning{background:#fff4e0;border-color:#a15c00;color:#4d2c00}
.banner-ok{background:#e9f6ee;border-color:#1b7f3b;color:#0d3d1c}
"""

_SEVERITIES = ("error", "warning", "info")


def _fields(f: Finding | Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    """(severity, id, stage, message) of a Finding or of its JSON form (the faults page holds dicts)."""
    if isinstance(f, Finding):
        return f.severity.value, f.id, f.stage, f.message
    sev = f.get("severity", "info")
    return str(getattr(sev, "value", sev)).lower(), str(f.get("id", "")), f.get("stage"), str(f.get("message", ""))


def _esc(value: Any) -> str:
    return escape(str(value), quote=True)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Verdict:
    """What the banner says: counts per severity and the first error (or, with none, the first warning)."""

    errors: int
    warnings: int
    infos: int
    first: tuple[str, str, str | None, str] | None  # (severity, id, stage, message)

    @property
    def worst(self) -> str:
        """The banner's colour: "error", "warning", or "ok" (info only, or nothing)."""
        return "error" if self.errors else "warning" if self.warnings else "ok"

    @property
    def counts(self) -> str:
        """"0 errors, 2 warnings" (and ", 3 info" when there are any)."""
        text = f"{_plural(self.errors, 'error')}, {_plural(self.warnings, 'warning')}"
        return text + (f", {self.infos} info" if self.infos else "")


def verdict_of(findings: Sequence[Finding | Mapping[str, Any]]) -> Verdict:
    rows = [_fields(f) for f in findings]
    n = {s: sum(1 for r in rows if r[0] == s) for s in _SEVERITIES}
    first = next((r for r in rows if r[0] == "error"), None) or next((r for r in rows if r[0] == "warning"), None)
    return Verdict(n["error"], n["warning"], n["info"], first)


def verdict_banner(findings: Sequence[Finding | Mapping[str, Any]], what: str = "") -> str:
    """The banner's HTML. `what` names what was judged when it is not obvious ("recording problems")."""
    v = verdict_of(findings)
    if v.first is None:
        detail = "no findings" if not v.infos else "nothing wrong found; the notes below are context"
    else:
        sev, fid, stage, message = v.first
        where = f" at stage <b>{_esc(stage)}</b>" if stage else ""
        detail = f"first {_esc(sev)}: <code>{_esc(fid)}</code>{where}: {_esc(message)}"
    scope = f' <span class="scope">· {_esc(what)}</span>' if what else ""
    return (f'<div class="banner banner-{v.worst}" role="status" data-errors="{v.errors}" '
            f'data-warnings="{v.warnings}"><span class="counts">{_esc(v.counts)}</span> '
            f'<span class="first">{detail if v.first else _esc(detail)}</span>{scope}</div>')
