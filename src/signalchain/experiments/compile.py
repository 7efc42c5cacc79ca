"""What torch.compile does across a few training updates: how often each compiled frame compiles,
the guard that failed each time, the graph breaks, and the shape of every tapped value.

A fresh model and optimizer run `budget.compile_steps` updates through the pipeline's own update
(`update_step`: its `train_step` when it has one) on consecutive batches of `loader("train")` (so
that the batch-to-batch variation of real data, crop lengths included, reaches the model), or on the
golden batch without a loader. `CompileWatch` reads what dynamo records for every compilation; no
logging setting or dynamo config is touched. When nothing has compiled after two updates the run
stops there: a model that is not compiled would not start compiling on the third. It also stops as
soon as the verdict cannot change (a frame already compiled again on more than half of the updates
the budget allows): each further update would only pay one more compilation.

Dynamo's caches are process-wide and keyed by code, not by model: a compiled `forward` from an earlier
model of the same class (the user's, or another family's fresh model) sits in the cache with guards
on that other module, so this model's first call would read as a recompilation, and earlier entries
count towards `config.recompile_limit`. So:

- before: `torch._dynamo.reset()` only when this process has compiled something already (otherwise
  there is nothing to clear, and nothing of the user's is dropped);
- after: `reset()` only when this run compiled something, so that its caches (which hold this model)
  do not leak into the families that run next.

A reset drops compiled code, never results: whatever was compiled before compiles again on its next
call. Inside `signalchain doctor` nothing of the user's training process is in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checks.compile import recompiling_frames
from ..pipeline import capabilities
from ..probes.compile_watch import CompileWatch, dynamo_state
from ..records.compile import CompileRecord
from .context import Context
from .optimisation._train import update_step

__all__ = ["measure_compile", "watch_updates", "reset_dynamo", "settled"]

IDLE_STEPS = 2  # updates without any compilation after which the run stops


def reset_dynamo() -> bool:
    """`torch._dynamo.reset()`; False where dynamo is unavailable or the reset fails."""
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception:
        return False
    return True


def settled(steps: int) -> Callable[[CompileRecord], bool]:
    """True once a frame recompiles per step whatever the remaining updates of `steps` would show."""

    def done(rec: CompileRecord) -> bool:
        planned = CompileRecord(steps=steps, compilations=rec.compilations)
        return any(True for _ in recompiling_frames(planned))

    return done


def watch_updates(ctx: Context, steps: int, enough: Callable[[CompileRecord], bool] | None = None) -> CompileRecord:
    """Run up to `steps` updates under a `CompileWatch` (until `enough(record)`) and return its record
    (dynamo left as it is)."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    loader = "loader" in capabilities(p)
    it: Any = iter(p.loader("train")) if loader else None
    watch = CompileWatch()
    tap = watch.tap_wrapper()
    for _ in range(steps):
        if it is not None:
            try:
                batch = next(it)
            except StopIteration:
                break  # a short finite loader: judge what it gave
        else:
            batch = ctx.batch()
        with watch.step():
            update_step(p, model, optimizer, batch, tap)
        if watch.record.steps >= IDLE_STEPS and not watch.record.compilations:
            break
        if enough is not None and enough(watch.record):
            break
    return watch.record


def measure_compile(ctx: Context) -> CompileRecord:
    """The doctor step: `watch_updates` between the resets the module docstring describes."""
    before = dynamo_state()
    cleared = before > 0 and reset_dynamo()
    rec: CompileRecord | None = None
    try:
        steps = int(ctx.budget.compile_steps)
        rec = watch_updates(ctx, steps, settled(steps))
    finally:
        compiled = rec is None or bool(rec.compilations) or dynamo_state() > 0
        after = compiled and reset_dynamo()
    assert rec is not None  # watch_updates returned (else its exception is on its way)
    said = ("dynamo reset before the watch (the process held compiled code)" if cleared else "",
            "reset after it (it compiled)" if after else "")
    rec.reset = "; ".join(x for x in said if x)
    return rec
