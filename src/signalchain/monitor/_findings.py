"""The Monitor's own findings when it could not judge a step, or could not locate what it judged."""

from __future__ import annotations

import math

from ..checks.base import make
from ..findings import Finding
from ._reading import LossReading

__all__ = ["replica_rank", "unjudged", "unlocated", "unwritten", "update_kept"]

CHECK = "monitor"


def replica_rank() -> int | None:
    """This process's rank when it is one of several replicas (torch.distributed initialised, world > 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return int(dist.get_rank())
    except Exception:  # a process group in a state it cannot answer from: judged as a single process
        pass
    return None


def update_kept(step: int, norm: float, rank: int) -> Finding:
    """Only this rank's loss is non-finite; the gradient every rank applies (all-reduced) is finite.
    Withholding the update here alone would make the replicas differ, so it goes ahead, said once."""
    return make("optim.update_kept", "info", "optimizer",
                f"step {step}: this rank's loss is not finite but the all-reduced gradient every rank applies "
                f"is (norm {norm:.4g}), so the update was applied: withholding it on rank {rank} alone "
                "would make the replicas differ", CHECK, hint="fix the non-finite loss named beside this",
                step=step, rank=rank, grad_norm=norm)


def unjudged(step: int, reason: str, norm: float, weights: list[str]) -> Finding:
    """The loss could not be read: the step was judged on its gradients and weights instead. A warning:
    not reading a loss is ours to fix, and a non-finite gradient or weight fires its own error."""
    finite = math.isfinite(norm) and not weights
    verdict = "finite" if finite else "NOT finite: the update must be skipped"
    return make("internal.check_failed", "warning", None,
                f"step {step}: the monitor could not judge the loss: {reason}; judged on the gradients "
                f"(norm {norm:.4g}) and the weights instead, which are {verdict}", CHECK,
                hint="pass check() the loss tensor (reduced or not), or a float",
                reason=reason, step=step, grad_norm=norm, weights_nonfinite=weights[:16])


def unlocated(step: int, what: str, reading: LossReading, norm: float, weights: list[str],
              replay_error: str | None, replayed: bool = False) -> Finding:
    """A non-finite step that no replay located: none was given, it failed (its error is quoted), or
    it ran and found every value finite (`replayed`: the batch does not make the value here)."""
    if what == "weights":
        return make("nonfinite.state", "error", "model", f"step {step}: {len(weights)} parameters hold non-finite "
                    f"values ({', '.join(weights[:4])}) and the loss could not be read", CHECK,
                    hint="run with Monitor(snapshot=True, scan_every=1) to replay the update that wrote them",
                    step=step, tensors=weights[:64])
    shown = (
        f"{reading.nonfinite} of {reading.elements} loss elements" if reading.elements > 1 else f"loss {reading.value}"
    )
    message = f"step {step}: the {what} is not finite ({shown}, gradient norm {norm})"
    extra: dict[str, object] = {}
    if replay_error:
        message += f"; the replay that should locate it failed: {replay_error}"
        hint = "fix the replay: replay(model, batch) must recompute this step's loss from the batch (no backward)"
    elif replayed:
        message += "; replaying this step on its batch makes no non-finite value"
        hint = ("the value did not come from this batch's forward: under data parallelism the gradient all-reduce "
                "carries another rank's non-finite gradients here (that rank's findings locate it); in one process, "
                "something outside the replayed forward (a backward hook, a non-deterministic kernel)")
        extra["replay_finite"] = True
    else:
        hint = "pass replay= (or pipeline=) to the Monitor to locate the first non-finite op"
    loss = what == "loss"
    return make("nonfinite.loss" if loss else "nonfinite.first", "error", "loss" if loss else None, message, CHECK,
                hint=hint, step=step, loss_elements=reading.elements, loss_nonfinite=reading.nonfinite, **extra)


def unwritten(step: int, tensors: list[str], replay_error: str | None) -> Finding:
    """Weights went non-finite in an update that was not (or could not be) replayed."""
    failed = f"; replaying the update failed: {replay_error}" if replay_error else ""
    extra = {"replay_error": replay_error} if replay_error else {}
    return make("nonfinite.state", "error", "optimizer", f"after step {step}, {len(tensors)} parameters hold "
                f"non-finite values: {', '.join(tensors[:4])}{failed}", CHECK,
                hint="run with Monitor(snapshot=True, scan_every=1) to replay the update that wrote them",
                tensors=tensors, **extra)
