"""The record the compile experiment fills and `checks/compile.py` judges (no torch in it).

What torch's compiler (dynamo) did during a few training updates of a fresh model: every frame it
compiled, on which update, why it compiled again (the guard that failed, in torch's own words), the
graph breaks it met, and the shape of every tapped value on each update.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Compilation", "GraphBreakSeen", "CompileRecord"]


@dataclass
class Compilation:
    """One frame dynamo compiled (or tried to)."""

    step: int  # the update it happened in (0 = the first)
    function: str  # the compiled code's name ("forward", "torch_dynamo_resume_in_forward_at_9"…)
    location: str  # file:line of the compiled function's first line
    reason: str | None = None  # the failed guard that made dynamo compile it again; None: first compile
    failed: str | None = None  # why the compilation did not produce a graph (the recompile limit…)
    after_stage: str | None = None  # the last stage tapped before it (where the compiled call sits)


@dataclass
class GraphBreakSeen:
    """A place where dynamo split a compiled function into graphs and ran Python in between."""

    reason: str  # dynamo's own words (the first line of its message)
    step: int = 0  # the update that met it first
    location: str | None = None  # the user's file:line dynamo was tracing when it broke
    explanation: str = ""  # dynamo's "Explanation:" and first "Hint:" lines, when it gives them


@dataclass
class CompileRecord:
    """`available`: dynamo could be imported (else nothing else is filled). `steps`: updates run.

    `shapes[stage]` holds the tapped value's shape on each update (None where the stage was not
    tapped or had no shape); `order` the stages in the order the step taps them.
    """

    available: bool = True
    steps: int = 0
    compilations: list[Compilation] = field(default_factory=list)
    graph_breaks: list[GraphBreakSeen] = field(default_factory=list)
    shapes: dict[str, list[list[int] | None]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    reset: str = ""  # what the experiment did to dynamo's caches, for the report
    why_unavailable: str = ""
