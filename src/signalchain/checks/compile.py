"""Judge what torch's compiler did over a few training updates: recompiling every step, graph breaks.

Input: a `CompileRecord` (the frames dynamo compiled on each update, the guard that failed each time
it compiled again, the graph breaks it met, the shape of every tapped value on each update).

A compiled function compiles once on the first update. With dynamo's default automatic dynamic
shapes, an input that changes shape (or a Python number that changes value) costs one more
compilation, after which dynamo treats that dimension as symbolic; a branch on a symbolic size may
cost one more. What is not normal is a new graph on most updates: the compiled function keeps
meeting inputs its guards reject (a new static shape per batch under `dynamic=False` or
`mark_static`, a new module object each step…), every update pays the compile, and after
`config.recompile_limit` compilations dynamo gives up and runs the function eagerly.

Rules (never `error`: slow training is not broken training):

- `perf.recompile` (warning): one compiled frame compiles again on ≥ 2 updates after the first and
  on more than half of them (`RECOMPILE_SHARE`), or dynamo gives up on it (the recompile limit).
  The stage is where the varying input is visible: walking back from the last stage tapped before
  the compiled call, the earliest stage of the nearest run of tapped values whose shape changes
  across updates (stages whose shape never changes end the run; values without a shape are
  skipped), when the failed guards are about shapes. Otherwise (a Python value, an object): no stage.
- `perf.graph_break` (info): dynamo split a compiled function; each reason with the user's line.
- `perf.not_compiled` (info): nothing compiled in the updates watched (or dynamo is unavailable):
  recompiles were not judged, and that is not a healthy verdict.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from .._units import plural, short_path
from ..findings import Finding
from ..records.compile import Compilation, CompileRecord
from .base import make

__all__ = ["judge_compile", "guard_kind", "varying_stage", "recompiling_frames"]

CHECK = "checks.compile"
RECOMPILE_MIN_STEPS = 2  # updates after the first with a new graph
RECOMPILE_SHARE = 0.5  # ... and more than this share of them
_LIMIT = re.compile(r"recompile[_ ]limit|cache[_ ]size[_ ]limit", re.I)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")


def guard_kind(reason: str | None) -> str:
    """What a failed guard is about, from dynamo's own words."""
    r = reason or ""
    if "size mismatch" in r or ".size()" in r or "sizes" in r:
        return "shape"
    if "stride mismatch" in r:
        return "stride"
    if "dtype" in r:
        return "dtype"
    if "device" in r:
        return "device"
    if "requires_grad" in r:
        return "requires_grad"
    if "check_obj_id" in r or "check_type_id" in r or "id(" in r:
        return "object identity"
    if re.search(r"(==|!=|<=|>=|<|>)", r):
        return "Python value"
    return "other"


_FIX = {
    "shape": ("the compiled function meets a new input shape on most updates and dynamo specialises on each "
              "one: give the data one shape (crop every example to the same length and pad, or bucket "
              "lengths to a few sizes), or let dynamo treat the dimension as symbolic: "
              "torch.compile(dynamic=True) or torch._dynamo.mark_dynamic(tensor, dim) on the varying input "
              "(not dynamic=False or mark_static)"),
    "Python value": ("dynamo specialises on a Python number or object that changes between updates: pass it as "
                     "a tensor, make it constant, or compile with dynamic=True so numbers stay symbolic"),
    "object identity": ("dynamo guards on an object that is new on each update (a module or function created "
                        "in the step): build it once and reuse it, or compile outside the step"),
    "dtype": "the input's dtype changes between updates: cast once, before the compiled call",
    "device": "the input moves between devices between updates: move it once, before the compiled call",
    "stride": "the input's memory layout changes between updates: call .contiguous() before the compiled call",
    "requires_grad": "the input's requires_grad flips between updates: keep it constant",
    "other": "run with TORCH_LOGS=recompiles to see every guard that failed",
}


def _steps_text(steps: list[int]) -> str:
    return ", ".join(str(s) for s in steps)


def recompiling_frames(rec: CompileRecord) -> Iterator[tuple[str, list[Compilation], bool]]:
    """(location, its compilations, whether dynamo gave up) for each frame that recompiles per step."""
    by_frame: dict[str, list[Compilation]] = {}
    for c in rec.compilations:
        by_frame.setdefault(c.location, []).append(c)
    later = max(rec.steps - 1, 0)
    for where, comps in by_frame.items():
        first = min(c.step for c in comps)
        again = sorted({c.step for c in comps if c.step > first})
        gave_up = any(c.failed and _LIMIT.search(c.failed) for c in comps)
        if gave_up or (len(again) >= RECOMPILE_MIN_STEPS and len(again) > RECOMPILE_SHARE * later):
            yield where, comps, gave_up


def varying_stage(rec: CompileRecord, anchor: str | None) -> str | None:
    """The earliest stage of the nearest run of shape-changing taps at or before `anchor` (see above)."""
    if anchor not in rec.order:
        return None
    found: str | None = None
    for stage in reversed(rec.order[: rec.order.index(anchor) + 1]):
        shapes = [tuple(s) for s in rec.shapes.get(stage, []) if s is not None]
        if not shapes:
            continue  # text, json, scalars: no shape to change
        if len(set(shapes)) > 1:
            found = stage
        elif found is not None:
            break  # a fixed shape ends the run
    return found


def _recompile(rec: CompileRecord) -> list[Finding]:
    frames = list(recompiling_frames(rec))
    if not frames:
        return []
    frames.sort(key=lambda f: (_RESUME.match(f[1][0].function) is not None, -len(f[1])))  # the function itself first
    where, comps, gave_up = frames[0]
    name = comps[0].function
    reasons = [c.reason for c in comps if c.reason]
    kinds = Counter(guard_kind(r) for r in reasons)
    kind = kinds.most_common(1)[0][0] if kinds else "other"
    anchor = Counter(c.after_stage for c in comps if c.after_stage).most_common(1)
    # only a shape guard is about a tapped value's shape (a Python number's guard is not: the batch's
    # padded length varying upstream would be blamed for nothing)
    stage = varying_stage(rec, anchor[0][0] if anchor else None) if kind == "shape" else None
    steps = sorted({c.step for c in comps})
    guard = reasons[-1] if reasons else "dynamo did not say"
    msg = (f"{name} ({short_path(where)}) compiled {plural(len(comps), 'time')} in {plural(rec.steps, 'update')} "
           f"(a new graph on updates {_steps_text(steps)}); the guard that failed: {guard}")
    if stage is not None:
        msg += f"; the shape that changes is first visible at {stage}: " + \
               ", ".join(str(s) for s in rec.shapes[stage] if s is not None)
    hint = _FIX[kind]
    if gave_up:
        msg += "; dynamo hit its recompile limit and now runs this function eagerly"
        hint += ("; past torch._dynamo.config.recompile_limit compilations dynamo stops compiling this function "
                 "and runs it eagerly, so the compile gains nothing and each earlier compilation cost a step")
    others = [f"{c[1][0].function} ({short_path(c[0])}): {len(c[1])}" for c in frames[1:]]
    return [make("perf.recompile", "warning", stage, msg, CHECK, hint,
                 function=name, location=short_path(where), compilations=len(comps), updates=rec.steps,
                 steps_compiled=steps, guard_kind=kind, guards=list(dict.fromkeys(reasons))[:6],
                 gave_up=gave_up, compiled_after_stage=anchor[0][0] if anchor else None,
                 shapes={stage: rec.shapes[stage]} if stage else {}, other_frames=others)]


def _graph_breaks(rec: CompileRecord) -> list[Finding]:
    if not rec.graph_breaks:
        return []
    parts = [f"{b.reason} @ {short_path(b.location) if b.location else '?'}" for b in rec.graph_breaks]
    msg = (f"dynamo split the compiled code at {plural(len(rec.graph_breaks), 'graph break')}: " + "; ".join(parts[:4])
           + ("; …" if len(parts) > 4 else ""))
    hint = ("each break ends a graph and runs Python before the next one (no fusion across it, the break's "
            "code runs eagerly on every call): " + (rec.graph_breaks[0].explanation or "see the reason")
            + "; torch._dynamo.explain(model)(*inputs) lists the breaks, and torch.compile(fullgraph=True) "
            "makes each an error at its line")
    return [make("perf.graph_break", "info", None, msg, CHECK, hint,
                 breaks=[{"reason": b.reason, "location": short_path(b.location) if b.location else None,
                          "update": b.step, "explanation": b.explanation} for b in rec.graph_breaks])]


def judge_compile(rec: CompileRecord | None) -> list[Finding]:
    if rec is None:
        return []
    if not rec.available:
        return [make("perf.not_compiled", "info", None,
                     f"torch's compiler (dynamo) is not available here ({rec.why_unavailable or 'cannot import it'}): "
                     "recompiles and graph breaks were not judged", CHECK,
                     "nothing to do unless the run uses torch.compile elsewhere", updates=rec.steps)]
    if not rec.compilations:
        return [make("perf.not_compiled", "info", None,
                     f"nothing was compiled with torch.compile in {plural(rec.steps, 'update')}: recompiles and "
                     "graph breaks were not judged", CHECK,
                     "if the real run compiles the model, make build_model return it compiled as training does",
                     updates=rec.steps)]
    return _recompile(rec) + _graph_breaks(rec)
