"""Layer 4: render findings, traces and metrics (terminal, JSON, HTML). Reads; never judges."""

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
