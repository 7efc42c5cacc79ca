"""Judge one collective before it runs: do all ranks issue the same one?

Input: every rank's description of the collective it is about to issue at the same position of the
watched group's sequence (`CollectiveCall`: the function, its tensors' shapes and dtypes, the user's
file:line). Pure: no torch, no I/O.

- `dist.desync` (error) @ runtime, kind `mismatch`: ranks are about to pair different collectives,
  or the same collective on tensors of different dtypes or sizes. gloo aborts the process inside
  such a pair ("Received data size doesn't match expected size"), NCCL hangs or mixes the tensors;
  either way nothing downstream is right. The message names each rank's call and line, so that the
  one only some ranks make (a logging all-reduce under `if rank == 0`) is plain to see. What must
  agree is what torch's `TORCH_DISTRIBUTED_DEBUG=DETAIL` wrapper checks: the collective, the
  dtypes, and the sizes where the collective needs equal sizes (not for all_to_all, gather,
  scatter, object collectives or barriers, whose sizes may differ between ranks by design).
"""

from __future__ import annotations

from ..findings import Finding
from ..records.distributed import CollectiveCall
from .base import make
from .distributed import odd_ranks

__all__ = ["judge_collective"]

CHECK = "checks.distributed_collective"
def judge_collective(seq: int, calls: dict[int, CollectiveCall], observer: int = 0) -> list[Finding]:
    """`dist.desync` when the ranks' calls at position `seq` of the group do not match."""
    ranks = sorted(calls)
    if len(ranks) < 2:
        return []
    sigs = [calls[r].signature() for r in ranks]
    if len(set(sigs)) == 1:
        return []
    odd = [ranks[i] for i in odd_ranks(sigs)]
    same_op = len({calls[r].op for r in ranks}) == 1
    what = "on tensors of different sizes or dtypes" if same_op else "different collectives"
    each = "; ".join(f"rank {r} calls {calls[r].describe()}" for r in ranks)
    abort = "gloo would abort inside it ('Received data size doesn't match'), NCCL hang or mix the tensors"
    return [make(
        "dist.desync", "error", "runtime",
        f"collective {seq + 1} of the default group pairs {what}: {each}. Caught before it ran: {abort}",
        CHECK,
        hint="every rank must issue the same collectives in the same order: the call that only some ranks make "
             "(a logging all-reduce under `if rank == 0`, a reduce of a rank-local size) goes out of the branch, "
             "or the others make it too",
        kind="mismatch", seq=seq + 1, ranks=odd, observer=observer,
        calls={str(r): calls[r].to_dict() for r in ranks})]
