"""One exchange on the side gloo group: every rank's window, sequence number and parameter hashes.

Tensors only (no `all_gather_object`: it pickles). Every tensor has a size all ranks agree on
before it is sent — gloo aborts the process on a size mismatch — so the header (fixed size) goes
first and says how many hashes follow and whether a parameter's shape lets it be broadcast.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..records.distributed import SECTIONS, DistExchange, RankWindow

__all__ = ["param_hashes", "sequence_number", "exchange"]

_MASK63 = (1 << 63) - 1


def param_hashes(params: Sequence[torch.Tensor]) -> list[int]:
    """One exact hash per parameter: blake2b of its CPU bytes with its shape and dtype, 63 bits.

    Exact, because DDP replicas must be bitwise equal; a tolerance would hide the slow drift that
    silently diverges data-parallel replicas (Megatron hashes parameters for the same reason).
    """
    out = []
    for p in params:
        t = p.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous().reshape(-1)
        h = hashlib.blake2b(digest_size=8)
        h.update(f"{tuple(p.shape)}{t.dtype}".encode())
        if t.numel():
            h.update(memoryview(t.view(torch.uint8).numpy()))
        out.append(int.from_bytes(h.digest(), "little") & _MASK63)
    return out


def sequence_number(group: Any) -> int:
    """The group's collective sequence number (-1 where this torch does not say)."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    fn = getattr(group, "_get_sequence_number_for_group", None)
    try:
        return int(fn()) if fn is not None else -1
    except RuntimeError:  # a backend without sequence numbers
        return -1


def _gather(t: torch.Tensor, side: Any, world: int) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t, group=side)
    return out


def _max_abs_diff(p: torch.Tensor, side: Any, world: int, rank: int) -> dict[int, float]:
    """Broadcast rank 0's copy of one parameter and gather each rank's max |Δ| against it."""
    local = p.detach().to("cpu", torch.float64).contiguous().clone()
    ref = local.clone()
    dist.broadcast(ref, src=dist.get_global_rank(side, 0), group=side)
    mine = torch.tensor([float((local - ref).abs().max()) if local.numel() else 0.0],
                        dtype=torch.float64)
    return {r: float(v.item()) for r, v in enumerate(_gather(mine, side, world))}


def exchange(*, step: int, side: Any, group: Any, rank: int, world: int,
             window: tuple[int, dict[str, float], dict[str, float], float], sync: set[str],
             names: list[str], params: list[torch.Tensor], hash_params: bool,
             prev_seq: list[int] | None) -> DistExchange:
    """Run one exchange (every rank of `side` calls it at the same step); the record it makes."""
    steps, means, medians, step_med = window
    seq = sequence_number(group)
    mask = sum(1 << i for i, s in enumerate(SECTIONS) if s in sync)
    header = torch.tensor([step, seq, len(params), steps, mask, int(hash_params)], dtype=torch.int64)
    heads = [h.tolist() for h in _gather(header, side, world)]
    times = torch.tensor([means[s] for s in SECTIONS] + [medians[s] for s in SECTIONS] + [step_med],
                         dtype=torch.float64)
    rows = [t.tolist() for t in _gather(times, side, world)]
    n = len(SECTIONS)
    windows = [RankWindow(rank=r, steps=int(h[3]), mean=dict(zip(SECTIONS, row[:n])),
                          median=dict(zip(SECTIONS, row[n:2 * n])), step_median=row[2 * n],
                          seq=int(h[1]))
               for r, (h, row) in enumerate(zip(heads, rows))]
    sync_all = sorted({s for h in heads for i, s in enumerate(SECTIONS) if int(h[4]) >> i & 1})
    counts = [int(h[2]) for h in heads]
    ex = DistExchange(step=step, world=world, windows=windows, sync_sections=sync_all,
                      prev_seq=prev_seq, param_names=list(names), param_counts=counts)
    # Hash only when every rank agrees to and has as many parameters (the tensor sizes must match).
    if not all(int(h[5]) for h in heads) or len(set(counts)) != 1 or not params:
        return ex
    mine = torch.tensor(param_hashes(params), dtype=torch.int64)
    ex.hashes = [h.tolist() for h in _gather(mine, side, world)]
    # Every rank has every hash, so each finds the same first differing parameter without a word.
    first = next((i for i in range(len(params)) if len({h[i] for h in ex.hashes}) > 1), None)
    if first is not None:
        p = params[first]
        shapes = _gather(torch.tensor([p.numel(), p.dim()], dtype=torch.int64), side, world)
        if len({tuple(s.tolist()) for s in shapes}) == 1:
            ex.max_abs_diff = _max_abs_diff(p, side, world, rank)
    return ex
