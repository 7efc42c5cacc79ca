"""Judges of a profiled step by stage: expensive data preparation and a stage's memory peak.

`perf.expensive_stage` (warning) @ a data-preparation stage (its window ended before the model's
first trainable module ran) that takes at least `EXPENSIVE_SHARE` of the step (the loader's wait
included) and at least `EXPENSIVE_MS`, on EVERY profiled step: the lowest of the per-step shares is
judged, not their mean, so that one step a busy machine stretched is not enough. Each share has the
step thread's run-queue delay (the time it was ready to run while other processes held the cores,
read at each boundary; `StageCost.busy_ms`) taken out of the window and of the step. Measured on a
loaded 2-core machine (per-step minimum / mean over 2 steps, seeds 0-2): the reference's largest
data-preparation share is 0.07-0.12 / 0.08-0.15 (its numpy codec; on seed 1 one step's
`audio.original` took 0.27, the other 0.02), the symbolic bed's and its fine-tuning zoo members'
0.13-0.17 / 0.14-0.19 (the REMI tokenizer run per step), so 0.3 leaves 1.7x over the largest clean
share; the profile faults' lowest shares are 0.70-0.83. The floor keeps a
pipeline whose whole step is a few milliseconds from being told to cache a millisecond. The HF
MusicGen bed is not silent, and rightly: it runs the frozen EnCodec encoder on every clip in every
step (0.41-0.46 of its step at `tokens`), the very cost this id names. Where the work runs is the
user's sampled lines and the profiler's costliest operators of the window.

A step during which the step's thread queued for a CPU `BUSY_SHARE` (40 %) of its wall time or more
is not judged at all, and the summary says so: with other processes on the cores, which window they
stretch is chance, and taking the wait out is not enough, because the step also waits, not
runnable, for its own pool threads (torch's intra-op, OpenBLAS) that were preempted. Measured here:
the clean reference's `tokens` window reached 0.40-0.56 of a step with one 2-thread process beside
it (the step thread queued 42-66 % of those steps), against 0.10-0.17 idle, where the thread queued
1-31 % (its own sampler and pool threads: 5 threads on 2 cores).

`perf.memory_peak` (warning) @ a tapped stage whose window allocates far more than its output
needs: for a data-preparation stage, its peak above the level at its start less the bytes of the
value it tapped; for a model stage, the transient part only (its peak less what it keeps live:
activations saved for the backward are the model's need). It fires when that excess is at least
`MEMORY_RATIO` times the stage's tapped input and output together and at least `MEMORY_SHARE` of
the step's peak live memory (and `MEMORY_FLOOR` bytes): the clean reference's largest excess is
the forward's temporaries, about 0.06 of the step's peak. Otherwise the stage that sets the step's
peak is an info row of the table, not a finding.

Slow is not broken (DESIGN §4): both are warnings, and the profile itself is an info summary.
"""

from __future__ import annotations

from ..findings import Finding
from ..records.profile import DATA, MODEL, StageCost, StepProfile

__all__ = ["judge_profile", "step_shares", "busy_steps", "BUSY_SHARE", "EXPENSIVE_SHARE", "EXPENSIVE_MS",
           "MEMORY_RATIO", "MEMORY_SHARE",
           "MEMORY_FLOOR", "excess_bytes"]

EXPENSIVE_SHARE = 0.3
EXPENSIVE_MS = 10.0
MEMORY_RATIO = 4.0
MEMORY_SHARE = 0.15
MEMORY_FLOOR = 1 << 20
BUSY_SHARE = 0.4


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _hint(s: StageCost) -> str:
    ops = " ".join(o.name for o in s.ops[:3]).lower()
    name = s.stage.lower()
    if "conv" in ops or name.startswith("tokens"):
        return ("the codec (or another frozen encoder) runs on every clip of every step: encode the dataset "
                "once and cache the tokens (keyed by clip and crop), then crop the cached tokens")
    if "resampl" in name:
        return ("resample once, offline or when the clip is first read, with an FFT or polyphase resampler "
                "(torchaudio.functional.resample, soxr, scipy.signal.resample_poly), not inside the step")
    return ("work that does not depend on the batch (a tokenizer, a filterbank, a resampling kernel) belongs "
            "outside the step, built once; work that depends only on the clip can be cached or precomputed "
            "in the loader's workers")


def _where(s: StageCost) -> str:
    ops = ", ".join(f"{o.name} {o.ms:.1f} ms" + (f" at {o.site}" if o.site else "") for o in s.ops[:3] if o.ms > 0)
    lines = ", ".join(f"{line} ({share:.0%} of samples)" for line, share in list(s.lines.items())[:2])
    parts = [p for p in (f"operators: {ops}" if ops else "", f"lines: {lines}" if lines else "") if p]
    return "; ".join(parts) or "no operator or line was sampled inside it"


def step_shares(rep: StepProfile, s: StageCost) -> tuple[list[float], list[float]]:
    """(share, ms) of the stage on each profiled step, the step thread's run-queue delay (time other
    processes held the CPU) taken out of the window and of the step; the mean share and ms where the
    record keeps no steps apart."""
    if s.busy_ms and len(s.busy_ms) == len(rep.busy_ms):
        return [b / t if t > 0 else 0.0 for b, t in zip(s.busy_ms, rep.busy_ms)], list(s.busy_ms)
    return [s.share], [s.ms]


def busy_steps(rep: StepProfile) -> list[int]:
    """The profiled steps whose thread waited, runnable, for a CPU at least `BUSY_SHARE` of the step's
    wall time: other processes (or more threads than cores) held the machine, and which window they
    stretched is chance, so those steps' shares are not judged."""
    if len(rep.queued_ms) != len(rep.wall_ms):
        return []
    return [i for i, (q, w) in enumerate(zip(rep.queued_ms, rep.wall_ms)) if w > 0 and q >= BUSY_SHARE * w]


def _expensive(rep: StepProfile) -> list[Finding]:
    out = []
    busy = set(busy_steps(rep))
    for s in rep.stages:
        if s.kind != DATA:
            continue
        shares, ms = step_shares(rep, s)
        if busy and len(shares) == len(rep.wall_ms):
            shares = [x for i, x in enumerate(shares) if i not in busy]
            ms = [x for i, x in enumerate(ms) if i not in busy]
        if not shares:
            continue
        low, mean = min(shares), sum(shares) / len(shares)
        # expensive on every profiled step: one step that a busy machine stretched is not enough
        if low < EXPENSIVE_SHARE or min(ms) < EXPENSIVE_MS:
            continue
        took = (f"{low:.0%}-{max(shares):.0%} of the step on each of {len(shares)} profiled steps (mean {mean:.0%}; "
                if len(shares) > 1 else f"{mean:.0%} of the step (")
        out.append(Finding(
            "perf.expensive_stage", "warning", s.stage,
            f"data preparation at {s.stage!r} takes {took}{s.ms:.1f} of {rep.step_ms:.1f} ms wall time per step, "
            f"before the model runs); {_where(s)}",
            {"share": s.share, "ms": s.ms, "step_ms": rep.step_ms, "step_shares": [round(x, 4) for x in shares],
             "min_share": round(low, 4), "mean_share": round(mean, 4), "delay_ms": s.delay_ms,
             "ops": [o.__dict__ for o in s.ops], "lines": s.lines, "threshold_share": EXPENSIVE_SHARE,
             "threshold_ms": EXPENSIVE_MS},
            _hint(s), "checks.profile"))
    return out


def excess_bytes(s: StageCost) -> int:
    """What the stage allocated beyond its need (see the module doc); 0 for untapped windows."""
    if s.kind == DATA:
        return max(0, s.peak - s.value_bytes)
    if s.kind == MODEL:
        return max(0, s.peak - max(s.kept, s.value_bytes))
    return 0


def _memory_hint(s: StageCost) -> str:
    if any("conv" in o.name for o in s.ops):
        return ("a frozen encoder's activations inside the step (a codec on every clip): cache its output once "
                "and the memory goes with the time")
    return ("look for a dense tensor built where a compact one would do: a float [B, T, T] (or [B, H, T, T]) "
            "mask where a bool [B, T] padding mask and `is_causal=True` suffice, a float64/fp32 or host copy of "
            "the logits for a metric (compute the metric on the argmax, in the logits' dtype, under no_grad)")


def _memory(rep: StepProfile) -> list[Finding]:
    top = max((s.peak_level for s in rep.stages), default=0)
    out = []
    for s in rep.stages:
        excess = excess_bytes(s)
        need = s.value_bytes + s.input_bytes
        if excess < max(MEMORY_FLOOR, MEMORY_SHARE * top) or excess < MEMORY_RATIO * need:
            continue
        out.append(Finding(
            "perf.memory_peak", "warning", s.stage,
            f"{s.stage!r} allocates {_mb(s.peak)} at its peak, {_mb(excess)} more than its output needs "
            f"({_mb(s.value_bytes)} tapped, {_mb(s.input_bytes)} in); that is {excess / max(top, 1):.0%} of the "
            f"step's peak {_mb(top)}; costliest operators: " + (", ".join(
                f"{o.name}{' ' + o.shapes if o.shapes else ''}" + (f" at {o.site}" if o.site else "")
                for o in s.ops[:3]) or "—"),
            {"peak": s.peak, "kept": s.kept, "excess": excess, "value_bytes": s.value_bytes,
             "input_bytes": s.input_bytes, "step_peak": top, "ratio": MEMORY_RATIO, "share": MEMORY_SHARE},
            _memory_hint(s), "checks.profile"))
    return out


def judge_profile(rep: StepProfile) -> list[Finding]:
    """perf.expensive_stage and perf.memory_peak, then one info summary of the step by kind."""
    if not rep.stages:
        return []
    out = _expensive(rep) + _memory(rep)
    busy = busy_steps(rep)
    by_kind: dict[str, float] = {}
    for s in rep.stages:
        by_kind[s.kind] = by_kind.get(s.kind, 0.0) + s.share
    peak = rep.peak_stage
    text = ", ".join(f"{k} {v:.0%}" for k, v in by_kind.items())
    out.append(Finding(
        "perf.profile", "info", peak.stage if peak is not None else None,
        f"a profiled step ({rep.steps} averaged, {rep.batches} batches) takes {rep.step_ms:.1f} ms: {text}"
        + (f"; memory peaks in {peak.stage!r} at {_mb(peak.peak_level)} above the step's start" if peak else "")
        + (f"; the step waited {rep.delay_ms:.1f} ms for a CPU held by other processes (taken out of the shares "
           "judged)" if rep.delay_ms and rep.delay_ms >= 0.05 * rep.step_ms else "")
        + (f"; {len(busy)} of {len(rep.wall_ms)} profiled steps not judged for expensive stages: the step's thread "
           f"queued for a CPU {', '.join(f'{rep.queued_ms[i]:.0f}' for i in busy)} ms of "
           f"{', '.join(f'{rep.wall_ms[i]:.0f}' for i in busy)} ms (the machine was busy; rerun on an idle one)"
           if busy else ""),
        {"step_ms": rep.step_ms, "plain_ms": rep.plain_ms, "by_kind": by_kind, "memory_source": rep.memory_source,
         "trace": rep.trace_path, "delay_ms": rep.delay_ms, "busy_ms": rep.busy_ms, "wall_ms": rep.wall_ms,
         "queued_ms": rep.queued_ms, "busy_steps": busy}, "", "checks.profile"))
    return out
