"""The record the profiled replay fills and `checks/profile.py` judges: a training step's time and
memory by the pipeline's own stages (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["OpTime", "StageCost", "StepProfile", "DATA", "MODEL", "BACKWARD", "OPTIMIZER", "LOADER"]

#: What a stage's window holds: data preparation (before the model's first trainable module ran),
#: the model's forward and loss, the backward, the update, or the wait for the loader's batch.
DATA, MODEL, BACKWARD, OPTIMIZER, LOADER = "data", "model", "backward", "optimizer", "loader"


@dataclass
class OpTime:
    """One operator inside a stage: its self CPU time per step, calls per step, and the user's line
    that ran it most (sampled; "" when no sample fell inside it)."""

    name: str
    ms: float
    calls: float
    site: str = ""
    shapes: str = ""  # the input shapes of its costliest call


@dataclass
class StageCost:
    """One stage's window of the step, averaged over the profiled steps (memory: the largest); `busy_ms`
    keeps each step apart, so that a judge can ask for a share on every step, not on their mean."""

    stage: str
    kind: str  # DATA, MODEL, BACKWARD, OPTIMIZER or LOADER
    ms: float  # wall time of the window per step
    share: float  # of the step's own time (loader wait included): wall less the step thread's run-queue delay
    ops: list[OpTime] = field(default_factory=list)  # costliest first (self CPU time)
    lines: dict[str, float] = field(default_factory=dict)  # user file:line -> share of the window's samples
    op_ms: float = 0.0  # self CPU time of all the profiler's operators in the window
    allocated: int = 0  # bytes allocated inside the window (per step)
    peak: int = 0  # the most bytes live above the level at the window's start (largest over steps)
    peak_level: int = 0  # bytes live at that moment above the level at the step's start
    kept: int = 0  # bytes live at the window's end less those at its start (what it left for later)
    value_bytes: int = 0  # bytes of the value tapped at the stage (its output)
    input_bytes: int = 0  # bytes of the value tapped just before (its input, as far as taps tell)
    delay_ms: float = 0.0  # per step, the step thread's run-queue delay inside the window (other processes)
    busy_ms: list[float] = field(default_factory=list)  # each profiled step's window less that delay
    cpu_ms: float = 0.0  # per step, the step thread's own CPU time inside the window
    wall_share: float = 0.0  # of the step's wall time
    net_ms: float = 0.0  # per step, wall time inside outermost calls of modules with parameters
    frozen_ms: float = 0.0  # of which inside modules whose parameters are all frozen (a codec, a text encoder)
    frozen_numel: int = 0  # elements of the largest input a frozen module was called with in the window
    input_numel: int = 0  # elements of the largest array in the value tapped just before (its input)
    peak_in_net: bool = False  # the window's peak live memory came while a module with parameters ran


@dataclass
class StepProfile:
    """A profiled replay of a few training steps, the warm-up step(s) excluded."""

    stages: list[StageCost]
    step_ms: float  # mean wall time of a profiled step (loader wait included)
    steps: int  # profiled steps averaged
    device: str
    memory_source: str  # where the memory numbers come from
    batches: str  # "loader" or "golden"
    plain_ms: float | None = None  # a plain (unprofiled) step of the same run, for the overhead
    trace_path: str | None = None  # the Chrome trace written, when asked
    notes: list[str] = field(default_factory=list)
    busy_ms: list[float] = field(default_factory=list)  # each profiled step less its run-queue delay
    wall_ms: list[float] = field(default_factory=list)  # each profiled step's wall time
    queued_ms: list[float] = field(default_factory=list)  # each step, the step thread's run-queue delay
    delay_ms: float | None = None  # per step, the step thread's run-queue delay (None: not readable here)
    # each step, the run-queue delay of the process's other threads (the profile's sampler left out): the
    # step may have waited, blocked, for those of its pool, so a window's own time is known to within it
    others_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # each step, the step thread's own CPU time
    threads: int = 0  # intra-op threads the replay ran on (0: not recorded)
    # where the first replay's pool threads queued this share of its wall time, this replay ran again on
    # one intra-op thread (the step thread's own time is exact there); None: no re-run
    pool_queued_share: float | None = None

    def stage(self, name: str) -> StageCost | None:
        return next((s for s in self.stages if s.stage == name), None)

    @property
    def peak_stage(self) -> StageCost | None:
        """The stage at whose moment the step's live memory was highest."""
        live = [s for s in self.stages if s.peak > 0]
        return max(live, key=lambda s: s.peak_level) if live else None
