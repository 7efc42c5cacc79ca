"""Whose exception is it? A crash in the pipeline's code is a finding about the pipeline; a crash in
signalchain's own code is `internal.check_failed`. Either way the report goes on."""

from __future__ import annotations

import traceback

from ..findings import Finding, Severity, check_failed
from ..probes.frames import is_ours

__all__ = ["crash_origin", "crash_finding"]


def _is_library(path: str) -> bool:
    return "site-packages" in path or "/lib/python3" in path or path.startswith("<")


def crash_origin(exc: BaseException) -> tuple[str, str] | None:
    """("user", file:line) when the innermost non-library frame is the pipeline's code, else None.

    Library frames (torch, numpy, the standard library) are skipped: what matters is whose code
    called them. signalchain's own frames (but for the bundled reference, a user of the API) mean
    the crash is ours.
    """
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if _is_library(frame.filename) or frame.name in _RELAYS:
            continue
        return None if is_ours(frame.filename) else ("user", f"{frame.filename}:{frame.lineno}")
    return None


#: The frames of a probe's torch mode that only relay the op the pipeline called (`func(*args)`): an
#: op that raises inside one is the caller's (an embedding given index -100), not the probe's.
_RELAYS = frozenset({"__torch_dispatch__", "__torch_function__"})


def crash_finding(name: str, exc: BaseException) -> Finding:
    """A family that raised: inside the pipeline's code it is a finding about the pipeline."""
    origin = crash_origin(exc)
    if origin is not None:
        where = origin[1]
        after = getattr(exc, "signalchain_after_stage", None)  # the last stage tapped before the crash
        return Finding("pipeline.step_failed", Severity.ERROR, after,
                       f"the pipeline raised {type(exc).__name__} at {where} during the {name} family"
                       + (f", after stage {after}" if after else "") + f": {exc}",
                       {"traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
                        "after_stage": after},
                       hint="the step itself fails; fix this exception first", check=f"doctor.{name}")
    return check_failed(f"doctor.{name}", exc)
