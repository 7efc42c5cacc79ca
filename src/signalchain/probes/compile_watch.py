"""Watch what torch's compiler (dynamo) does during a few steps: frames compiled, why each compiled
again, graph breaks, and the shape of every tapped value.

It reads only what dynamo records for every compilation whatever the logging settings, and changes
no logging setting, config or hook:

- `torch._dynamo.utils.get_compilation_metrics()`: one record per frame dynamo compiled (a bounded
  deque of the latest 64): the code's name, file and first line, `recompile_reason` (the first guard
  of the cached entries that failed, in torch's words: "tensor 'x' size mismatch at index 1.
  expected 100, actual 120", "n == 100", …) and `fail_type`/`fail_reason` (the recompile limit
  hit: dynamo gives up and runs the frame eagerly).
- `torch._dynamo.graph_break_reasons`: every graph break met while compiling, with the user's stack.
- `torch._dynamo.utils.counters["frames"]["total"]`: frames compiled so far, read at each tap so that
  a compilation is placed between two taps (the stage tapped last before the compiled call).

Entries are told apart by identity before and after each step, so earlier compilations in the process
(the user's, other experiments') are never counted here. `available` is False where dynamo cannot be
imported; then the probe records shapes only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from ..records.compile import Compilation, CompileRecord, GraphBreakSeen
from .base import Probe

__all__ = ["CompileWatch", "dynamo_state", "RESUME_PREFIX"]

RESUME_PREFIX = "torch_dynamo_resume_in_"  # dynamo's name for the code after a graph break


def _dynamo() -> Any:
    """The dynamo module, its utils and the graph-break list, or None where they cannot be imported."""
    try:
        import torch._dynamo as dynamo
        from torch._dynamo import utils
    except Exception:  # a build without dynamo (some platforms), or a broken install
        return None
    if not hasattr(utils, "get_compilation_metrics") or not hasattr(utils, "counters"):
        return None
    return dynamo


def dynamo_state() -> int:
    """How many code objects dynamo holds compiled in this process since its last reset (0 where
    unavailable). Reads `convert_frame.input_codes`, the set `torch._dynamo.reset()` clears; where a
    torch lacks it, the frames compiled since the process started (an upper bound)."""
    dynamo = _dynamo()
    if dynamo is None:
        return 0
    codes = getattr(getattr(dynamo, "convert_frame", None), "input_codes", None)
    if codes is not None and hasattr(codes, "seen_ids"):
        return len(codes.seen_ids)
    return int(dynamo.utils.counters.get("frames", {}).get("total", 0))


def _shape(value: Any) -> list[int] | None:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return [int(d) for d in value.shape]
    return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text and text.strip() else ""


def _explanation(text: str) -> str:
    """dynamo's "Explanation:" line and its first "Hint:" line, when its message has them."""
    lines = [ln.strip() for ln in (text or "").splitlines()]
    explained = [ln for ln in lines if ln.startswith("Explanation:")][:1]
    return " ".join(explained + [ln for ln in lines if ln.startswith("Hint:")][:1])


def _reason(text: str | None) -> str | None:
    """The failed guard without dynamo's compile-id prefix ("0/3: ") and its source comment."""
    if not text:
        return None
    line = _first_line(text)
    line = re.sub(r"^\d+/\d+:\s*", "", line)
    return re.sub(r"\s{2,}#.*$", "", line).strip() or line


class CompileWatch(Probe):
    """Use `with watch.step():` around each update, with `tap_wrapper(tap)` as its tap; read `record`."""

    def __init__(self) -> None:
        super().__init__()
        self._dynamo = _dynamo()
        self.record = CompileRecord(available=self._dynamo is not None)
        self._taps: list[tuple[str, int]] = []  # (stage, frames compiled so far) at each tap of this step
        self._frames_seen: dict[str, tuple[str, str]] = {}  # dynamo's frame id -> (function, file:line)

    def _frames(self) -> int:
        if self._dynamo is None:
            return 0
        return int(self._dynamo.utils.counters.get("frames", {}).get("total", 0))

    def on_tap(self, stage: str, value: Any) -> None:
        rec = self.record
        if stage not in rec.shapes:
            rec.shapes[stage] = [None] * rec.steps
            rec.order.append(stage)
        column = rec.shapes[stage]
        if len(column) == rec.steps + 1:
            return  # tapped twice in one step: the first value counts
        column.append(_shape(value))
        self._taps.append((stage, self._frames()))

    @contextmanager
    def step(self) -> Iterator[None]:
        """One watched update: what dynamo compiled in it is added to `record` when it ends."""
        d = self._dynamo
        seen = {id(m) for m in d.utils.get_compilation_metrics()} if d is not None else set()
        breaks = {id(b) for b in d.graph_break_reasons} if d is not None else set()
        frames0 = self._frames()
        self._taps = []
        try:
            yield
        finally:
            if d is not None:
                self._collect(d, seen, breaks, frames0)
            self.record.steps += 1
            for column in self.record.shapes.values():
                column.extend([None] * (self.record.steps - len(column)))

    def _collect(self, d: Any, seen: set[int], breaks: set[int], frames0: int) -> None:
        rec, step = self.record, self.record.steps
        new = [m for m in d.utils.get_compilation_metrics() if id(m) not in seen]
        for j, m in enumerate(new):
            at = frames0 + j  # frames counted before this one
            before = [s for s, n in self._taps if n <= at]
            failed = None
            if getattr(m, "fail_type", None):
                failed = f"{m.fail_type}: {_first_line(str(m.fail_reason or ''))}"
            function, location = str(m.co_name or "?"), f"{m.co_filename}:{m.co_firstlineno}"
            frame = str(getattr(m, "compile_id", None) or "").split("/")[0]  # "0/8": frame 0, its 9th compile
            if m.co_filename is None:  # the compile dynamo gave up on records no code: its frame's earlier ones do
                function, location = self._frames_seen.get(frame, ("?", "?"))
            elif frame:
                self._frames_seen[frame] = (function, location)
            rec.compilations.append(Compilation(
                step=step, function=function, location=location,
                reason=_reason(getattr(m, "recompile_reason", None)), failed=failed,
                after_stage=before[-1] if before else None))
        grew = self._frames() - frames0
        if not new and grew > 0:  # a torch that keeps no compilation metrics: count the frames at least
            last = self._taps[-1][0] if self._taps else None
            rec.compilations += [Compilation(step=step, function="?", location="?", after_stage=last)
                                 for _ in range(grew)]
        known = {b.reason for b in rec.graph_breaks}
        for b in d.graph_break_reasons:
            if id(b) in breaks or not getattr(b, "graph_break", True):
                continue
            text = str(getattr(b, "reason", ""))
            reason = _first_line(text)
            stack = list(getattr(b, "user_stack", None) or [])
            where = f"{stack[-1].filename}:{stack[-1].lineno}" if stack else None
            if reason in known:
                continue
            known.add(reason)
            rec.graph_breaks.append(GraphBreakSeen(reason=reason, step=step, location=where,
                                                   explanation=_explanation(text)))
