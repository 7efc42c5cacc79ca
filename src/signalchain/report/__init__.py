"""Layer 4: render findings, traces and metrics (terminal, JSON, HTML). Reads; never judges.

Each name below loads its module on first use: the pages import matplotlib and the plots, which a
command that prints a table (or only its --help) should not pay for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` imports each on first use
    from .compare_page import render_compare
    from .doctor_page import render_doctor
    from .faults_page import render_faults
    from .html import HtmlReport, audio_player, findings_table, image_tag, table
    from .inspect_page import render_inspect
    from .jsonout import report_dict, write_json
    from .terminal import console, print_comparison, print_findings, print_trace

__all__ = [
    "HtmlReport",
    "audio_player",
    "console",
    "findings_table",
    "image_tag",
    "print_comparison",
    "print_findings",
    "print_trace",
    "render_compare",
    "render_doctor",
    "render_faults",
    "render_inspect",
    "report_dict",
    "table",
    "write_json",
]

_LAZY = {
    "render_compare": "compare_page", "render_doctor": "doctor_page", "render_faults": "faults_page",
    "HtmlReport": "html", "audio_player": "html", "findings_table": "html", "image_tag": "html", "table": "html",
    "render_inspect": "inspect_page", "report_dict": "jsonout", "write_json": "jsonout",
    "console": "terminal", "print_comparison": "terminal", "print_findings": "terminal", "print_trace": "terminal",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
