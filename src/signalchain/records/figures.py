"""The doctor's pictures as typed records: one dataclass per kind the report draws (`report.html`'s
`render_metric`). A family's `show` returns these; `to_dict()` gives the `{"kind": ...}` dict that the
JSON holds and the report draws. Optional fields left at None are left out of the dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Figure", "Table", "Bars", "Stack", "Curves", "Text", "Audio"]


class Figure:
    """One picture of the report; `kind` names how it is drawn."""

    kind = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in self.__dataclass_fields__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass
class Table(Figure):
    title: str
    headers: list[str]
    rows: list[list[Any]]
    kind = "table"


@dataclass
class Bars(Figure):
    """One bar per name; `logx` None draws the report's default (logarithmic)."""

    title: str
    values: dict[str, float]
    x_label: str = ""
    logx: bool | None = None
    kind = "bars"


@dataclass
class Stack(Figure):
    """One bar of `segments` (`[name, value, group]`) end to end in the given order, a colour per group,
    named in `groups` order in the legend (a step's time by stage, in pipeline order)."""

    title: str
    segments: list[list[Any]]
    groups: list[str]
    x_label: str = ""
    kind = "stack"


@dataclass
class Curves(Figure):
    """Lines: `series` maps a name to `[xs, ys]`; `vlines` marks x positions by name; `ylim` is [low, high];
    `rug` maps a name to x positions drawn as ticks on the x axis (checkpoints on a step axis)."""

    title: str
    series: dict[str, list[list[Any]]]
    x_label: str = ""
    y_label: str = ""
    logx: bool | None = None
    logy: bool | None = None
    vlines: dict[str, float] | None = None
    ylim: list[float] | None = None
    rug: dict[str, list[float]] | None = None
    kind = "curves"


@dataclass
class Text(Figure):
    title: str
    text: str = ""
    kind = "text"


@dataclass
class Audio(Figure):
    """Players: each clip is `{"label", "audio" ([C, T] or [T]), "note"}`."""

    title: str
    sample_rate: int
    clips: list[dict[str, Any]] = field(default_factory=list)
    kind = "audio"
