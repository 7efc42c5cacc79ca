"""Judges of a profiled step by stage: expensive data preparation and a stage's memory peak.

`perf.expensive_stage` (warning) @ a data-preparation stage (its window ended before the model's
first trainable module ran) that takes at least `EXPENSIVE_SHARE` of the step's wall time (the
loader's wait included) and at least `EXPENSIVE_MS` per step. Measured on the clean beds (2 cores,
loader batches): the reference's largest data-preparation share is 0.06-0.09 (resampling; its numpy
codec 0.07), clean reference zoo members' 0.08, the symbolic bed's 0.13-0.17 (its REMI tokenizer
run per step), so 0.3 leaves 1.75x over the largest clean share for a loaded machine's noise; the
floor keeps a pipeline whose whole step is a few milliseconds from being told to cache a
millisecond. The HF MusicGen bed is not silent, and rightly: it runs the frozen EnCodec encoder on
every clip in every step (0.41-0.46 of its step at `tokens`), the very cost this id names. Where
the work runs is the user's sampled lines and the profiler's costliest operators of the window.

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

__all__ = ["judge_profile", "EXPENSIVE_SHARE", "EXPENSIVE_MS", "MEMORY_RATIO", "MEMORY_SHARE", "MEMORY_FLOOR",
           "excess_bytes"]

EXPENSIVE_SHARE = 0.3
EXPENSIVE_MS = 10.0
MEMORY_RATIO = 4.0
MEMORY_SHARE = 0.15
MEMORY_FLOOR = 1 << 20


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


def _expensive(rep: StepProfile) -> list[Finding]:
    out = []
    for s in rep.stages:
        if s.kind != DATA or s.share < EXPENSIVE_SHARE or s.ms < EXPENSIVE_MS:
            continue
        out.append(Finding(
            "perf.expensive_stage", "warning", s.stage,
            f"data preparation at {s.stage!r} takes {s.share:.0%} of the step ({s.ms:.1f} of {rep.step_ms:.1f} ms, "
            f"before the model runs); {_where(s)}",
            {"share": s.share, "ms": s.ms, "step_ms": rep.step_ms, "ops": [o.__dict__ for o in s.ops],
             "lines": s.lines, "threshold_share": EXPENSIVE_SHARE, "threshold_ms": EXPENSIVE_MS},
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
    by_kind: dict[str, float] = {}
    for s in rep.stages:
        by_kind[s.kind] = by_kind.get(s.kind, 0.0) + s.share
    peak = rep.peak_stage
    text = ", ".join(f"{k} {v:.0%}" for k, v in by_kind.items())
    out.append(Finding(
        "perf.profile", "info", peak.stage if peak is not None else None,
        f"a profiled step ({rep.steps} averaged, {rep.batches} batches) takes {rep.step_ms:.1f} ms: {text}"
        + (f"; memory peaks in {peak.stage!r} at {_mb(peak.peak_level)} above the step's start" if peak else ""),
        {"step_ms": rep.step_ms, "plain_ms": rep.plain_ms, "by_kind": by_kind, "memory_source": rep.memory_source,
         "trace": rep.trace_path}, "", "checks.profile"))
    return out
