"""Whose code is a frame? One answer for every place that names the user's file:line.

signalchain's own files are machinery, except the bundled reference pipeline, which is a user of the
API like any other; torch's files are machinery too (what matters is who called the op). The
standard library and click are never the place to blame (a `contextlib` wrapper, the command line
that started signalchain), and nothing outside the machinery that called the pipeline is the
pipeline's: past the doctor's own frame lie click, the entry script or pytest.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from types import FrameType

import torch

__all__ = ["OWN_DIR", "TORCH_DIR", "is_ours", "never_blamed", "code_frames", "user_location"]

OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # signalchain/
TORCH_DIR = os.path.dirname(torch.__file__)
_REFERENCE_DIR = os.path.join(OWN_DIR, "reference")
#: An integration is the pipeline's code written for the user (a crash in its step, or in the
#: library it calls, is the pipeline's), like the reference pipeline.
_INTEGRATIONS_DIR = os.path.join(OWN_DIR, "integrations")
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib")
                      if (p := sysconfig.get_paths().get(k))})
#: signalchain's code that runs a pipeline: its frames are never inside the pipeline's work
_DRIVERS = tuple(os.path.join(OWN_DIR, d) + os.sep for d in ("cli", "experiments"))
_LAUNCHERS = ("click",)  # packages that only ever call signalchain (a command line), never the pipeline's work


def is_ours(path: str) -> bool:
    """True for signalchain's machinery (the reference pipeline and the integrations count as user code)."""
    path = os.path.abspath(path)
    return path.startswith(OWN_DIR) and not path.startswith((_REFERENCE_DIR, _INTEGRATIONS_DIR))


def never_blamed(path: str) -> bool:
    """A frame no finding names: the standard library (frozen modules too) and click."""
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for lib in ("site-packages", "dist-packages"):  # first: a venv's "stdlib" path holds its site-packages
        if lib in parts:
            i = parts.index(lib)
            return i + 1 < len(parts) and parts[i + 1] in _LAUNCHERS
    return "<frozen" in path or path.startswith(_STDLIB_DIRS)


def code_frames(frame: FrameType | None) -> Iterator[tuple[str, int]]:
    """(absolute path, line) of the frames of the code signalchain was running, innermost first.

    The innermost run of torch and signalchain frames (the probe that noticed, the op) is skipped;
    torch is skipped wherever it is (`Module.__call__` between two of the user's lines), and so are
    the frames `never_blamed` names. The walk ends at the first signalchain machinery frame past the
    pipeline's code, or at the first frame of signalchain's drivers (the CLI, the experiments): what
    called the pipeline is signalchain, and what called signalchain (click, the entry script, pytest)
    is nobody's bug.
    """
    entered = False
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if is_ours(path):
            if entered or path.startswith(_DRIVERS):
                return
        elif not path.startswith(TORCH_DIR):
            entered = True
            if not never_blamed(path):
                yield path, frame.f_lineno
        frame = frame.f_back


def user_location(depth: int = 2) -> str:
    """file:line of the innermost live frame that is user code (not torch, not signalchain's machinery,
    not the standard library or click), starting `depth` frames above this call; "?" when none is."""
    for path, line in code_frames(sys._getframe(depth)):
        return f"{path}:{line}"
    return "?"
