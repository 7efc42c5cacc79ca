"""The profile family: a training step's time and memory by the pipeline's own stages
(`signalchain doctor --family profile`, part of `--symptom slow`)."""

from __future__ import annotations

from ...checks.profile import excess_bytes, judge_profile
from ...records.figures import Figure, Stack, Table
from ...records.profile import BACKWARD, DATA, LOADER, MODEL, OPTIMIZER, StepProfile
from ..context import Knob
from ..doctor import Family, Step, register
from ..profile import measure_profile

__all__: list[str] = []

KNOBS = {
    # after one warm-up and one plain update: enough to average away one noisy step, few enough to stay a
    # small part of the doctor's time
    "profile_steps": Knob(1, 2, 3, "profiled updates (after one warm-up update)"),
}


#: The stacked bar's groups, in legend order: data preparation apart from the model's own work.
GROUPS = {LOADER: "waiting for the loader", DATA: "data preparation", MODEL: "model forward and loss",
          BACKWARD: "backward", OPTIMIZER: "optimizer"}


def _mib(n: int) -> float:
    return round(n / 2**20, 2)


def _ops(rep: StepProfile, i: int) -> str:
    s = rep.stages[i]
    return "; ".join(f"{o.name} {o.ms:.2f} ms" + (f" @ {o.site.rsplit('/', 1)[-1]}" if o.site else "")
                     for o in s.ops[:3]) or "—"


def _lines(rep: StepProfile, i: int) -> str:
    return "; ".join(f"{line.rsplit('/', 1)[-1]} {v:.0%}" for line, v in list(rep.stages[i].lines.items())[:2]) or "—"


def _metrics(rep: StepProfile) -> dict[str, Figure]:
    peak = rep.peak_stage
    rows = [[s.stage, s.kind, round(s.ms, 2), f"{s.share:.1%}", _ops(rep, i), _lines(rep, i), _mib(s.allocated),
             _mib(s.peak), _mib(excess_bytes(s)), "◀ step peak" if peak is s else ""]
            for i, s in enumerate(rep.stages)]
    plain = f"; a plain update {rep.plain_ms:.1f} ms" if rep.plain_ms is not None else ""
    return {
        "profile.stages": Table(
            f"Step time and memory by stage ({rep.steps} profiled steps on {rep.batches} batches, {rep.device}: "
            f"{rep.step_ms:.1f} ms per step{plain}; memory: {rep.memory_source})",
            ["stage", "kind", "time (ms)", "share", "top operators (self CPU) @ call site", "user lines (sampled)",
             "allocated (MiB)", "peak (MiB)", "beyond its output (MiB)", ""], rows),
        "profile.time": Stack(f"Where a step's time goes, stage by stage in pipeline order ({rep.step_ms:.1f} ms "
                              "per step)", [[s.stage, round(s.ms, 2), GROUPS.get(s.kind, s.kind)] for s in rep.stages],
                              list(GROUPS.values()), x_label="ms per step"),
    }


register(Family("profile", "Where a step's time and memory go, by the pipeline's own stages (torch.profiler)",
                after=("performance",), knobs=KNOBS, steps=(
    Step("measure", say="profile: profiling a few updates by stage", measure=measure_profile,
         judges=(judge_profile,), show=_metrics),
)))
