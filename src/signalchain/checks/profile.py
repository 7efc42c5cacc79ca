"""Judges of a profiled step by stage: expensive data preparation and a stage's memory peak.

*Own time on a shared machine.* Every share is of the step's own time: each window's wall time
less the step thread's run-queue delay (read at each tap: time it was runnable while other processes
held the cores; `StageCost.busy_ms`), over the step's own time. That is the idle machine's figure
except where the step waited, blocked, for its own pool threads (torch's intra-op, OpenBLAS) while
other processes held them; their run-queue delay (`StepProfile.others_ms`, the profile's sampler
left out) bounds it, so a window's share has a lower bound, its own time less all of that, over the
step. No step is dropped for being busy: a verdict needs the lower bound, and where only the
estimate crosses the threshold the summary says the verdict was withheld and what to rerun with.
(Before, a step whose thread queued 40 % of its time was not judged at all: on a machine with load
3-6 on 2 cores every step was dropped.)

`perf.expensive_stage` (warning) @ a data-preparation stage (its window ended before the model's
first trainable module ran) that takes at least `EXPENSIVE_SHARE` of the step (the loader's wait
included) and at least `EXPENSIVE_MS`, on EVERY profiled step, on the lower bound: the lowest of
the per-step shares is judged, not their mean, so that one step a busy machine stretched is not
enough. Measured (lowest of 2 steps, seeds 0-2): the reference's largest data-preparation share is
0.07-0.12 (its numpy codec), the symbolic bed's and its fine-tuning zoo members' 0.13-0.17 (the
REMI tokenizer run per step), so 0.3 leaves 1.7x over the largest clean share; the profile faults'
lowest shares are 0.70-0.83. The floor keeps a pipeline whose whole step is a few milliseconds
from being told to cache a millisecond.

A stage whose time is mostly a frozen network's forward (a module whose parameters are all frozen:
a codec, a text encoder) run on the stage's own input (its largest input no more than
`OWN_INPUT` times the largest array tapped just before) is the on-the-fly convention of AudioCraft's
solver and HF's MusicGen fine-tuning: tokens or embeddings computed per batch. It is an `info` with
what caching would save, never a warning. The same network run on more than its stage was given
(a whole clip encoded, then cropped) is work thrown away: a warning as above.

`perf.memory_peak` (warning) @ a tapped stage whose window allocates far more than its output
needs: for a data-preparation stage, its peak above the level at its start less the bytes of the
value it tapped; for a model stage, the transient part only (its peak less what it keeps live:
activations saved for the backward are the model's need). It fires when that excess is at least
`MEMORY_RATIO` times the stage's tapped input and output together and at least `MEMORY_SHARE` of
the step's peak live memory (and `MEMORY_FLOOR` bytes). A peak reached while a module with
parameters ran is that network's working memory (a text encoder's or codec's activations, freed
when it returns): not a leak, so only what the stage still holds at its end beyond its output is
judged there, and the transient peak is an info. (The HF bed's EnCodec encode peaked at 11 MiB,
all freed, and was warned before.)

Slow is not broken (DESIGN §4): both are warnings, and the profile itself is an info summary.
"""

from __future__ import annotations

from .._units import plural
from ..findings import Finding
from ..records.profile import DATA, MODEL, StageCost, StepProfile

__all__ = ["judge_profile", "step_shares", "step_lows", "busy_steps", "BUSY_SHARE", "EXPENSIVE_SHARE",
           "EXPENSIVE_MS", "MEMORY_RATIO", "MEMORY_SHARE", "MEMORY_FLOOR", "OWN_INPUT", "FROZEN_SHARE",
           "excess_bytes", "held_bytes", "frozen_stage"]

EXPENSIVE_SHARE = 0.3
EXPENSIVE_MS = 10.0
MEMORY_RATIO = 4.0
MEMORY_SHARE = 0.15
MEMORY_FLOOR = 1 << 20
BUSY_SHARE = 0.4  # a step whose thread queued this much of its wall time is said to be on a busy machine
FROZEN_SHARE = 0.5  # of a window's wall time inside frozen modules: the window is that network's
OWN_INPUT = 1.5


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


def step_lows(rep: StepProfile, s: StageCost) -> tuple[list[float], list[float]]:
    """`step_shares` less, in each step, all that the process's other threads queued (the most the
    step can have waited, blocked, for its own pool threads while other processes held them)."""
    shares, ms = step_shares(rep, s)
    if len(rep.others_ms) != len(ms) or len(ms) != len(rep.busy_ms):
        return shares, ms
    low = [max(m - o, 0.0) for m, o in zip(ms, rep.others_ms)]
    return [x / t if t > 0 else 0.0 for x, t in zip(low, rep.busy_ms)], low


def busy_steps(rep: StepProfile) -> list[int]:
    """The profiled steps whose thread waited, runnable, for a CPU at least `BUSY_SHARE` of the step's
    wall time: other processes (or more threads than cores) held the machine. Their times are taken
    out, not dropped; the summary names them."""
    if len(rep.queued_ms) != len(rep.wall_ms):
        return []
    return [i for i, (q, w) in enumerate(zip(rep.queued_ms, rep.wall_ms)) if w > 0 and q >= BUSY_SHARE * w]


def frozen_stage(s: StageCost) -> bool:
    """Most of the window ran inside modules whose parameters are all frozen (a codec, a text encoder)."""
    return s.ms > 0 and s.frozen_ms >= FROZEN_SHARE * s.ms


def _own_input(s: StageCost) -> bool:
    """The frozen network ran on the stage's own input (as far as the tap before it tells)."""
    return s.input_numel > 0 and s.frozen_numel <= OWN_INPUT * s.input_numel


def _expensive(rep: StepProfile) -> tuple[list[Finding], list[str]]:
    """(findings, stages whose verdict the other threads' queueing leaves open)."""
    out, open_ = [], []
    for s in rep.stages:
        if s.kind != DATA:
            continue
        shares, ms = step_shares(rep, s)
        lows, low_ms = step_lows(rep, s)
        if not shares:
            continue
        low, mean = min(lows), sum(shares) / len(shares)
        # expensive on every profiled step: one step that a busy machine stretched is not enough
        if low < EXPENSIVE_SHARE or min(low_ms) < EXPENSIVE_MS:
            if min(shares) >= EXPENSIVE_SHARE and min(ms) >= EXPENSIVE_MS:
                open_.append(s.stage)
            continue
        took = (f"{min(shares):.0%}-{max(shares):.0%} of the step on each of {len(shares)} profiled steps (mean "
                f"{mean:.0%}; " if len(shares) > 1 else f"{mean:.0%} of the step (")
        convention = frozen_stage(s) and _own_input(s)
        wasted = frozen_stage(s) and not convention and s.input_numel > 0
        if convention:
            message = (f"data preparation at {s.stage!r} is a frozen network's forward on the stage's own input: "
                       f"{took}{s.ms:.1f} of {rep.step_ms:.1f} ms wall time per step, {s.frozen_ms:.1f} ms inside "
                       f"the network); {_where(s)}: the on-the-fly convention (AudioCraft's solver, HF's "
                       "fine-tuning scripts), not a defect")
            hint = ("to save that share, compute it once per clip and crop outside the step (cache codec tokens "
                    "or text embeddings keyed by the clip and its crop); with random crops, encode whole clips "
                    "once and crop the cached tokens")
        else:
            extra = (f"; the frozen network read {s.frozen_numel / s.input_numel:.1f}× the elements of the "
                     "stage's input: work on data the step then drops" if wasted else "")
            message = (f"data preparation at {s.stage!r} takes {took}{s.ms:.1f} of {rep.step_ms:.1f} ms wall time "
                       f"per step, before the model runs); {_where(s)}{extra}")
            hint = _hint(s)
        out.append(Finding(
            "perf.expensive_stage", "info" if convention else "warning", s.stage, message,
            {"share": s.share, "ms": s.ms, "step_ms": rep.step_ms, "step_shares": [round(x, 4) for x in shares],
             "min_share": round(min(shares), 4), "low_share": round(low, 4), "mean_share": round(mean, 4),
             "delay_ms": s.delay_ms, "cpu_ms": s.cpu_ms, "frozen_ms": s.frozen_ms, "frozen_numel": s.frozen_numel,
             "input_numel": s.input_numel, "convention": convention,
             "ops": [o.__dict__ for o in s.ops], "lines": s.lines, "threshold_share": EXPENSIVE_SHARE,
             "threshold_ms": EXPENSIVE_MS},
            hint, "checks.profile"))
    return out, open_


def excess_bytes(s: StageCost) -> int:
    """What the stage allocated beyond its need (see the module doc); 0 for untapped windows."""
    if s.kind == DATA:
        return max(0, s.peak - s.value_bytes)
    if s.kind == MODEL:
        return max(0, s.peak - max(s.kept, s.value_bytes))
    return 0


def held_bytes(s: StageCost) -> int:
    """What a data stage still holds at its end beyond its output (a model stage's held memory is its
    saved activations: none counts)."""
    return max(0, s.kept - s.value_bytes) if s.kind == DATA else 0


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
        need = s.value_bytes + s.input_bytes

        def large(x: int, need: int = need) -> bool:
            return x >= max(MEMORY_FLOOR, MEMORY_SHARE * top) and x >= MEMORY_RATIO * need

        excess = excess_bytes(s)
        if not large(excess):
            continue
        network = s.peak_in_net and not large(held_bytes(s))
        ops = ", ".join(f"{o.name}{' ' + o.shapes if o.shapes else ''}" + (f" at {o.site}" if o.site else "")
                        for o in s.ops[:3]) or "—"
        msg = (f"{s.stage!r} allocates {_mb(s.peak)} at its peak, {_mb(excess)} more than its output needs "
               f"({_mb(s.value_bytes)} tapped, {_mb(s.input_bytes)} in); that is {excess / max(top, 1):.0%} of the "
               f"step's peak {_mb(top)}")
        if network:
            msg += (f", reached inside a network's forward and freed by the stage's end ({_mb(held_bytes(s))} "
                    "held): its working memory (a codec's or text encoder's activations), not a leak")
        out.append(Finding(
            "perf.memory_peak", "info" if network else "warning", s.stage, f"{msg}; costliest operators: {ops}",
            {"peak": s.peak, "kept": s.kept, "excess": excess, "held": held_bytes(s), "value_bytes": s.value_bytes,
             "input_bytes": s.input_bytes, "step_peak": top, "ratio": MEMORY_RATIO, "share": MEMORY_SHARE,
             "in_network": s.peak_in_net},
            "" if network else _memory_hint(s), "checks.profile"))
    return out


def _busy_note(rep: StepProfile, open_: list[str]) -> str:
    busy = busy_steps(rep)
    parts = []
    if rep.pool_queued_share is not None:
        parts.append(f"the pool threads of a first replay queued {rep.pool_queued_share:.0%} of its wall time behind "
                     "other processes (the step waits for them where no reading shows it): these shares are of a "
                     f"replay on {plural(rep.threads or 1, 'intra-op thread')}, where the step thread's own time is "
                     "the step's; for your thread count's, profile on an idle machine")
    if rep.delay_ms and rep.delay_ms >= 0.05 * rep.step_ms:
        parts.append(f"the step's thread queued {rep.delay_ms:.1f} ms per step for a CPU held by other processes "
                     f"({len(busy)} of {len(rep.wall_ms)} steps over {BUSY_SHARE:.0%} of their time): taken out of "
                     "every share")
    if rep.others_ms and max(rep.others_ms) >= 0.05 * rep.step_ms:
        parts.append(f"its other threads queued {max(rep.others_ms):.1f} ms at most per step (the shares judged "
                     "allow for all of it)")
    if open_:
        parts.append(f"not judged: {', '.join(repr(x) for x in open_)}, expensive unless the step waited for its own "
                     "queued pool threads: rerun with `torch.set_num_threads(1)` (OMP_NUM_THREADS=1) or on an idle "
                     "machine")
    return "".join(f"; {p}" for p in parts)


def judge_profile(rep: StepProfile) -> list[Finding]:
    """perf.expensive_stage and perf.memory_peak, then one info summary of the step by kind."""
    if not rep.stages:
        return []
    expensive, open_ = _expensive(rep)
    out = expensive + _memory(rep)
    by_kind: dict[str, float] = {}
    for s in rep.stages:
        by_kind[s.kind] = by_kind.get(s.kind, 0.0) + s.share
    peak = rep.peak_stage
    text = ", ".join(f"{k} {v:.0%}" for k, v in by_kind.items())
    spread = (f" ({min(rep.busy_ms):.1f}-{max(rep.busy_ms):.1f} ms of its own)" if len(rep.busy_ms) > 1 else "")
    out.append(Finding(
        "perf.profile", "info", peak.stage if peak is not None else None,
        f"a profiled step ({rep.steps} averaged, {rep.batches} batches) takes {rep.step_ms:.1f} ms{spread}: {text}"
        + (f"; memory peaks in {peak.stage!r} at {_mb(peak.peak_level)} above the step's start" if peak else "")
        + _busy_note(rep, open_),
        {"step_ms": rep.step_ms, "plain_ms": rep.plain_ms, "by_kind": by_kind, "memory_source": rep.memory_source,
         "trace": rep.trace_path, "delay_ms": rep.delay_ms, "busy_ms": rep.busy_ms, "wall_ms": rep.wall_ms,
         "queued_ms": rep.queued_ms, "busy_steps": busy_steps(rep), "others_ms": rep.others_ms,
         "cpu_ms": rep.cpu_ms, "not_judged": open_}, "", "checks.profile"))
    return out
