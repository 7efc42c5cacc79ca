"""Layer 3: datasets without a model: manifests, files, captions, splits, leakage.

`run_audit` audits datasets on disk (the `signalchain audit` command); `audit_clips` runs the same
judges on splits held in memory (the doctor's splits family).
"""

from .memory import ClipAudit, audit_clips
from .run import AuditResult, run_audit

__all__ = ["AuditResult", "ClipAudit", "audit_clips", "run_audit"]
