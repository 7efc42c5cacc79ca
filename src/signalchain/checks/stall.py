"""Judge a stall: no training step completed within the watchdog's timeout (`perf.stall`).

Input: a `StallRecord` (the phase the run is in, the user's line, every thread's stack). The id
means what it means in `checks/performance.py`: the run stopped making progress for far longer than
it should, at stage `loader` when it is waiting for its data and `runtime` otherwise (checkpoint
saving, a collective, compilation, forward, backward, the optimizer are all inside the step's time).

Severity: `warning` while the stall is within 3 × the timeout, `error` from there on. The other
`perf.stall` rules are warnings because slow training is not broken training, and a first stall at
the timeout may be one slow save or one slow fetch that ends by itself. A step that has not finished
in three times the limit the user chose for it is no longer slow but hung (a deadlock, a dead peer,
a loader that will never deliver): the run is broken. The watchdog re-judges the same episode when
it crosses that line, so one stall stays one finding.
"""

from __future__ import annotations

from ..findings import Finding
from ..records.stall import StallRecord
from .base import make

__all__ = ["judge_stall", "phase_words", "stall_stage", "ESCALATE", "CHECK"]

CHECK = "checks.stall"
ESCALATE = 3.0  # a stall this many timeouts long is a hang: error

_WORDS = {
    "loader": "waiting for the data loader",
    "checkpoint": "saving a checkpoint",
    "collective": "inside a collective",
    "compile": "compiling",
    "optimizer": "in the optimizer",
    "backward": "in backward",
    "forward": "in forward",
    "step": "inside the step (the stack shows no known phase)",
    "idle": "idle",
}

_HINTS = {
    "loader": "the step waits for its batch: time `__getitem__` at {site} (a slow file, network or "
              "decode), raise `num_workers`/`prefetch_factor`, or check that the workers are alive "
              "(`timeout=` on the DataLoader makes a dead worker an error instead of a hang)",
    "checkpoint": "the step blocks on a synchronous save ({site}): save less often, write to local disk "
                  "and upload in the background, or save asynchronously "
                  "(`torch.distributed.checkpoint.async_save`, a background thread)",
    "collective": "this rank waits in `{collective}` for its peers: a peer is slower, hung or at a "
                  "different collective; the rank watch names the missing rank, and "
                  "TORCH_DISTRIBUTED_DEBUG=DETAIL (with `monitored_barrier` on gloo) says which rank "
                  "never arrived",
    "compile": "compilation is slow, or recompiles: run with TORCH_LOGS=recompiles,graph_breaks, "
               "mark dynamic shapes (`torch._dynamo.mark_dynamic`), or raise `first_timeout` when only "
               "the first step compiles",
    "optimizer": "the optimizer step is slow or blocked at {site}: look for a host sync or a huge "
                 "parameter group; profile one step with `torch.profiler`",
    "backward": "backward is slow or blocked: a custom autograd function or hook at {site}, or a "
                "gradient hook waiting for a peer (DDP); profile one step with `torch.profiler`",
    "forward": "forward is slow or blocked at {site}: an unexpectedly expensive layer, a host sync, "
               "or an input far larger than usual; profile one step with `torch.profiler`",
    "step": "the watchdog could not tell the phase: look at {site} and the stacks in evidence "
            "(wrap parts of the step in `watchdog.phase(...)` to name them)",
}


_WORKER_HINT = ("the slow `__getitem__` runs in a DataLoader worker process, whose stack this process "
                "cannot show ({site} is where it waits): rerun with `num_workers=0` to get its line, or "
                "`py-spy dump --pid` a worker; then time that `__getitem__` (a slow file, network or decode), "
                "raise `num_workers`/`prefetch_factor`, or check that the workers are alive (`timeout=` on "
                "the DataLoader makes a dead worker an error instead of a hang)")


def phase_words(phase: str, collective: str | None = None, workers: bool = False) -> str:
    """The phase in words, as the message says it ("waiting for the data loader", ...)."""
    words = _WORDS.get(phase, f"in {phase}")
    if phase == "collective" and collective:
        words += f" ({collective})"
    if phase == "loader" and workers:
        words += " (its worker processes are late)"
    return words


def stall_stage(phase: str) -> str:
    """DESIGN §4: `perf.stall` is blamed on `loader` or `runtime`."""
    return "loader" if phase == "loader" else "runtime"


def judge_stall(rec: StallRecord) -> list[Finding]:
    """One `perf.stall` finding for one stall episode."""
    held = rec.lasted_s if rec.lasted_s is not None else rec.since_s
    severity = "error" if rec.timeout > 0 and held >= ESCALATE * rec.timeout else "warning"
    if rec.first_step:
        when = "before the first step completed"
    else:
        when = "after the last completed step" if rec.step is None else f"after step {rec.step}"
    site = rec.site or rec.where or "an unknown line"
    if rec.lasted_s is not None:
        length = f"stalled for {rec.lasted_s:.1f} s (then went on)"
    else:
        length = f"completed no step for {rec.since_s:.1f} s"
    message = (f"{rec.name} {length} {when} (timeout {rec.timeout:g} s): "
               f"{phase_words(rec.phase, rec.collective, bool(rec.loader_workers))}, at {site}")
    if rec.phase_source == "stack" and rec.explicit_phase and rec.explicit_phase != rec.phase:
        message += f" (the code said {rec.explicit_phase!r}; the stack shows {rec.phase})"
    template = _WORKER_HINT if rec.phase == "loader" and rec.loader_workers else _HINTS.get(rec.phase, _HINTS["step"])
    hint = template.format(site=site, collective=rec.collective or "a collective")
    if severity == "error":
        hint = f"the step has not finished in {held / rec.timeout:.0f}× the timeout, so it is hung; " + hint
    evidence = dict(phase=rec.phase, since_s=round(rec.since_s, 3), step=rec.step, site=rec.site,
                    where=rec.where, phase_source=rec.phase_source, explicit_phase=rec.explicit_phase,
                    stack_phase=rec.stack_phase, timeout_s=rec.timeout, first_step=rec.first_step,
                    thread=rec.thread, pid=rec.pid, episode=rec.episode, stacks=rec.stacks)
    if rec.collective:
        evidence["collective"] = rec.collective
    if rec.loader_workers is not None:
        evidence["loader_workers"] = rec.loader_workers
    if rec.dump_path:
        evidence["dump"] = rec.dump_path
    if rec.lasted_s is not None:
        evidence["lasted_s"] = round(rec.lasted_s, 3)
    return [make("perf.stall", severity, stall_stage(rec.phase), message, CHECK, hint=hint, **evidence)]
