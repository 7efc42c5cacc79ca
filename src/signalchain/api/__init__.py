"""The commands as Python functions (DESIGN §1 layer 5, §5): `doctor`, `audit`, `listen`, `compare`, `capture`.

    import signalchain as sc
    r = sc.doctor("train/debug.py:pipeline", symptom="flat-loss")
    print(r)                   # verdict, counts, the first error with its stage and numbers
    r.to_html("doctor.html")   # the page `signalchain doctor --html` writes

Each returns a `Report` (`results.py`): `.findings`, `.ok`, `.to_json()` (the command line's `--json`),
`.to_html(path)` (its `--html`) and a readable `str()`. Reach them as `signalchain.doctor` and so on:
`import signalchain` stays cheap, and this package loads (with numpy and torch) on first use.
"""

from .commands import audit, capture, compare, doctor, history, listen
from .results import AuditReport, CaptureReport, CompareReport, DoctorReport, ListenReport, Report

__all__ = ["AuditReport", "CaptureReport", "CompareReport", "DoctorReport", "ListenReport", "Report", "audit",
           "capture", "compare", "doctor", "history", "listen"]
