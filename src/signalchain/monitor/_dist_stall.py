"""What a stalled rank publishes, and how it reads the others: the flight recorder and the store.

Only the store is used here (set / check / get): the collectives are what is hung. Everything is
JSON; nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from typing import Any

import torch

from ..records.distributed import Collective, RankStall

__all__ = ["flight_record", "rank_stall", "stall_to_json", "stall_from_json", "read_states",
           "main_stack"]

RECENT = 8  # flight-recorder entries a rank publishes (the last ones, and every pending one)
POLL_S = 0.05


def _recorder_on() -> bool:
    for var in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        try:
            if int(os.environ.get(var, "0")) > 0:
                return True
        except ValueError:
            pass
    return False


def flight_record(labels: dict[str, str] | None = None) -> list[Collective] | None:
    """This process's last collectives from torch's flight recorder; None where it is off."""
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json", None)
    if dump is None or not _recorder_on():
        return None
    data = json.loads(dump(True, True))
    status = data.get("pg_status") or {}
    out = []
    for e in data.get("entries") or []:
        if e.get("is_p2p"):
            continue
        group = str((e.get("process_group") or [e.get("pg_id", "0")])[0])
        seq = int(e.get("collective_seq_id", -1))
        done = status.get(str(e.get("pg_id", group)), {}).get("last_completed_collective")
        pending = not e.get("retired", False) and (done is None or seq > int(done))
        out.append(Collective(seq=seq, op=str(e.get("profiling_name", "")).split(":")[-1],
                              sizes=[list(s) for s in e.get("input_sizes") or []],
                              dtypes=[str(d) for d in e.get("input_dtypes") or []],
                              pending=pending, group=group, label=(labels or {}).get(group, "")))
    keep = out[-RECENT:]
    return keep + [c for c in out[:-RECENT] if c.pending]


def main_stack(stacks: Any) -> str:
    """The main thread's stack out of the watchdog's `stacks` (a dict per thread, a list or text)."""
    if isinstance(stacks, dict):
        for k, v in stacks.items():
            if "main" in str(k).lower():
                return v if isinstance(v, str) else "\n".join(map(str, v))
        first = next(iter(stacks.values()), "")
        return first if isinstance(first, str) else "\n".join(map(str, first))
    if isinstance(stacks, (list, tuple)):
        return "\n".join(map(str, stacks))
    return str(stacks or "")


def rank_stall(state: dict[str, Any], *, rank: int, seq: int,
               recent: list[Collective] | None) -> RankStall:
    """This rank's `RankStall` out of the watchdog's state dict."""
    step = state.get("step")
    return RankStall(rank=rank, step=int(step) if step is not None else None,
                     phase=str(state.get("phase") or ""), since_s=float(state.get("since_s") or 0.0),
                     site=str(state.get("site") or ""), where=str(state.get("where") or ""),
                     stack=main_stack(state.get("stacks"))[-4000:], seq=seq,
                     recent=recent or [], recorded=recent is not None,
                     pid=int(state.get("pid") or os.getpid()))


def stall_to_json(s: RankStall, published_at: float) -> str:
    return json.dumps({"published_at": published_at, "state": asdict(s)})


def stall_from_json(text: str | bytes) -> tuple[float, RankStall]:
    data = json.loads(text)
    st = dict(data["state"])
    st["recent"] = [Collective(**c) for c in st.get("recent") or []]
    return float(data["published_at"]), RankStall(**st)


def read_states(store: Any, world: int, mine: RankStall, *, fresh_after: float,
                grace_s: float) -> dict[int, RankStall | None]:
    """Every rank's state published after `fresh_after` (wall clock), waiting up to `grace_s`."""
    states: dict[int, RankStall | None] = {r: None for r in range(world)}
    states[mine.rank] = mine
    deadline = time.monotonic() + grace_s
    while True:
        for r in range(world):
            if states[r] is not None:
                continue
            key = f"stall/{r}"
            if store.check([key]):
                at, s = stall_from_json(store.get(key))
                if at >= fresh_after:
                    states[r] = s
        if all(v is not None for v in states.values()) or time.monotonic() >= deadline:
            return states
        time.sleep(POLL_S)
