"""Whose code is a frame? One answer for every place that names the user's file:line.

signalchain's own files are machinery, except the bundled reference pipeline, which is a user of the
API like any other; torch's files are machinery too (what matters is who called the op).
"""

from __future__ import annotations

import os
import sys

import torch

__all__ = ["OWN_DIR", "TORCH_DIR", "is_ours", "user_location"]

OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # signalchain/
TORCH_DIR = os.path.dirname(torch.__file__)
_REFERENCE_DIR = os.path.join(OWN_DIR, "reference")
#: An integration is the pipeline's code written for the user (a crash in its step, or in the
#: library it calls, is the pipeline's), like the reference pipeline.
_INTEGRATIONS_DIR = os.path.join(OWN_DIR, "integrations")


def is_ours(path: str) -> bool:
    """True for signalchain's machinery (the reference pipeline and the integrations count as user code)."""
    path = os.path.abspath(path)
    return path.startswith(OWN_DIR) and not path.startswith((_REFERENCE_DIR, _INTEGRATIONS_DIR))


def user_location(depth: int = 2) -> str:
    """file:line of the innermost live frame that is user code (not torch, not signalchain's machinery),
    starting `depth` frames above this call."""
    frame = sys._getframe(depth)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(TORCH_DIR) and not is_ours(path) and "<frozen" not in path:
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"
