"""The compile family: does a compiled model recompile across updates, and where does dynamo break its
graph (`signalchain doctor --symptom slow`)."""

from __future__ import annotations

from ..._units import short_path
from ...checks.compile import judge_compile
from ...records.compile import CompileRecord
from ...records.figures import Figure, Table
from ..compile import measure_compile
from ..context import Knob
from ..doctor import Family, Step, register

__all__: list[str] = []

KNOBS = {
    # 1 warm-up update + enough later ones that "a new graph on most updates" is not one dynamic-shape
    # recompilation (dynamo's automatic dynamic shapes) plus one guard on a symbolic size
    "compile_steps": Knob(5, 6, 8, "updates watched for compilations (stops after 2 without any)"),
}


def _tables(rec: CompileRecord) -> dict[str, Figure]:
    if not rec.compilations:
        return {}
    rows = [[c.step, c.function, short_path(c.location), c.after_stage or "—", c.reason or ("first" if not c.failed
             else "—"), c.failed or ""] for c in rec.compilations]
    return {"compile.compilations": Table(
        f"Compilations by torch.compile in {rec.steps} updates" + (f" ({rec.reset})" if rec.reset else ""),
        ["update", "function", "where", "after stage", "guard that failed", "gave up"], rows)}


register(Family("compile", "Compiled models: recompiling on every update, graph breaks",
                after=("performance",), knobs=KNOBS, steps=(  # after: the loader's clips are made by then
    Step("watch", say="compile: watching torch.compile over a few updates", measure=measure_compile,
         judges=(judge_compile,), show=_tables),
)))
