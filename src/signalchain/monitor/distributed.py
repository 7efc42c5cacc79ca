"""`RankWatch`: rank-aware observation of a torch.distributed run (torchrun, DDP; gloo or NCCL).

    rw = RankWatch(ddp_model, every=50)
    for step, batch in enumerate(loader):
        with rw.section("forward"): loss = ddp_model(batch)
        with rw.section("backward"): loss.backward()
        with rw.section("optimizer"): opt.step()
        rw.step_end(step)            # every `every` steps: one exchange, on every rank
    rw.close()

Every process must construct it (creating the side group is collective over the world). Its own
exchanges run on a side gloo group, so they never interleave with the user's collectives and work
beside NCCL. Every `every` steps the ranks all-gather their section times, their collective
sequence number on the watched group and one hash per parameter; rank 0 judges
(`checks.distributed`) and its `findings` are the run's. When a rank's steps stop, the watchdog
calls `on_stall` on every rank: each publishes its state through the store (never a collective:
those are what is hung), reads the others' within a grace, and judges (`checks.distributed_stall`).
Other ranks keep their findings locally and publish them in the store; rank 0 merges those it can
read (in `on_stall` and `close`), deduplicated by fault (`fault_key`): the first finding of a fault
stays, with `seen` (how many times it was found) and `last_step` added to its evidence.

Time inside the Python-level collectives this thread issues on the watched group (DDP's buffer
broadcast in every forward, SyncBatchNorm, a metric's all-reduce) is counted in the synchronising
section "collective", not in the section it ran in (`_dist_collectives`). With
`check_collectives=True` (or SIGNALCHAIN_CHECK_COLLECTIVES=1) each such collective is first
compared across ranks (op, dtypes, sizes, the user's line) through the store, and one the ranks
disagree on is reported (`dist.desync`, kind "mismatch") and raised as `CollectiveMismatch` instead
of being run (`_dist_check`). `share` / `shared` carry a rank's own findings (a located NaN) to
rank 0 through the store.

Set `TORCH_FR_BUFFER_SIZE=<n>` (e.g. 64) before `init_process_group` to let a hang name the
collective each rank waits in (op, sizes, dtypes, from torch's flight recorder, gloo included);
without it a hang is judged from the sequence numbers and the watchdog's phase and stack.

Without an initialised process group it is a no-op of world 1. Nothing it does raises into the
run (except `CollectiveMismatch`, when asked for): a failure becomes an `internal.check_failed`
finding, and a side exchange that fails (a timeout, a dead peer) switches the exchanges off.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from ..checks.distributed import judge_exchange
from ..checks.distributed_stall import judge_stall
from ..findings import Finding, check_failed
from ..records.distributed import StallView
from ._dist_check import CollectiveCheck, as_pending, checking
from ._dist_collectives import unwatch, watch
from ._dist_exchange import exchange, sequence_number
from ._dist_share import publish, read_shared
from ._dist_stall import flight_record, rank_stall, read_states, stall_to_json
from ._dist_timing import SectionClock

__all__ = ["RankWatch", "fault_key"]

CHECK = "monitor.distributed"
_instances = 0  # RankWatch objects made in this process: the same count on every rank


def fault_key(f: Finding) -> tuple[object, ...]:
    """What makes two findings the same fault: the id and who/what they name, not the step or the
    numbers (a straggler found at every exchange, or by every rank, is one finding)."""
    ev = f.evidence
    if not f.id.startswith("dist."):
        return (f.id, f.message)
    named = tuple(repr(ev.get(k)) if not isinstance(ev.get(k), dict) else "" for k in (
        "kind", "rank", "section", "parameter", "ranks", "hung_ranks", "missing_ranks",
        "collective", "seq"))  # (a stall's "ranks" is each rank's state: not who is named)
    return (f.id, *named)


class RankWatch:
    """Per-rank section times, sequence numbers and parameter hashes, exchanged every `every` steps."""

    def __init__(self, model: torch.nn.Module, *, every: int = 50, group: Any = None,
                 timeout: float = 60.0, on_finding: Callable[[Finding], None] | None = None,
                 hash_params: bool = True, straggler_ratio: float = 1.5, grace: float | None = None,
                 check_collectives: bool | None = None) -> None:
        global _instances
        self.every = max(1, int(every))
        self.timeout = float(timeout)
        # how long a stalled rank waits for the others' states (default: half the side group's timeout);
        # the live session ties it to the watchdog's timeout, so a hang is judged within 2 x that
        self.grace = float(grace) if grace is not None else self.timeout / 2
        self.hash_params = hash_params
        self.straggler_ratio = float(straggler_ratio)
        self.findings: list[Finding] = []
        self._shared: list[Finding] = []  # a rank > 0's session findings handed to rank 0 (`share`)
        self._on_finding = on_finding
        self._lock = threading.Lock()
        self._seen: dict[tuple[object, ...], int] = {}  # fault_key -> index in findings
        self._clock = SectionClock()
        self._group = group
        self._side: Any = None
        self._store: Any = None
        self._prev_seq: list[int] | None = None
        self._live = False
        self._labels: dict[str, str] = {}
        self._steps = 0  # step_end calls: the same count on every rank, whatever `step` says
        self._slow: set[tuple[object, object]] = set()  # (rank, section) judged a straggler at the last exchange
        self.rank, self.world = 0, 1
        self.check: CollectiveCheck | None = None  # the cross-rank check of each collective, when on
        named = list(model.named_parameters()) if model is not None else []
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        if not (dist.is_available() and dist.is_initialized()):
            return
        try:
            _instances += 1
            self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
            ranks = dist.get_process_group_ranks(group) if group is not None else None
            self._side = dist.new_group(ranks=ranks, backend="gloo",
                                        timeout=datetime.timedelta(seconds=self.timeout))
            side_name = dist.distributed_c10d._get_process_group_name(self._side)
            self._labels = {side_name: "signalchain's side group"}
            store = dist.distributed_c10d._get_default_store()
            self._store = dist.PrefixStore(f"signalchain/rankwatch{_instances}/", store)
            self._live = self.world > 1
            if self._live:  # time inside collectives on this thread is synchronisation, not compute
                self.check = CollectiveCheck(self._store, self.rank, self.world, group, wait_s=self.timeout,
                                             on_finding=lambda f: self._record([f])) \
                    if checking(check_collectives) else None
                watch(group, self._clock.collective, check=self.check)
        except Exception as exc:  # never break the run: observe nothing instead
            self._record([check_failed(CHECK, exc)])

    # --- timing -----------------------------------------------------------------------------
    @contextmanager
    def section(self, name: str, *, sync: bool = False) -> Iterator[None]:
        """Time one section of this step ("loader", "forward", "backward", "optimizer", "other");
        `sync=True` marks a section that contains collectives (backward is one by default)."""
        with self._clock.section(name, sync):
            yield

    def add_time(self, section: str, seconds: float, *, sync: bool = False) -> None:
        """Count `seconds` the caller measured itself towards `section` of this step."""
        self._clock.add(section, seconds, sync)

    def enter(self, section: str | None) -> None:
        """This rank is in `section` from now on (the previous one ends here): for trainer hooks,
        which see where sections begin rather than whole sections."""
        try:
            self._clock.enter(section)
        except Exception as exc:
            self._record([check_failed(CHECK, exc)])

    def pending_collective(self) -> str | None:
        """The collective this process waits in, per the flight recorder ("all_reduce [676] float"),
        or None (none pending, or the recorder is off). Under DDP the gradient all-reduce is issued
        from autograd's C++ side, so a rank hung in it shows only `backward` in its Python stack:
        the stall watchdog asks this to name the phase."""
        checking_call = as_pending(self.check, refused=False)  # waiting for the others in the check
        if checking_call is not None:
            return checking_call.describe()
        try:
            recent = flight_record(self._labels) or []
        except Exception:
            return None
        pending = [c for c in recent if c.pending]
        return pending[0].describe() if pending else None

    # --- exchange ---------------------------------------------------------------------------
    def step_end(self, step: int) -> None:
        """Close this step; every `every` steps, exchange and judge (all ranks must call it)."""
        try:
            if not self._live:
                return  # nothing to exchange with: keep no rows either
            self._clock.end_step()
            self._steps += 1
            if self._steps % self.every:
                return
            ex = exchange(step=step, side=self._side, group=self._group, rank=self.rank,
                          world=self.world, window=self._clock.window(), sync=self._clock.sync,
                          names=self._names, params=self._params, hash_params=self.hash_params,
                          prev_seq=self._prev_seq)
            self._prev_seq = [w.seq for w in ex.windows]
            if self.rank == 0:
                self._record(self._persistent(judge_exchange(ex, self.straggler_ratio)))
        except Exception as exc:
            self._live = False  # a failed collective leaves the side group unusable
            self._record([check_failed(CHECK, exc)])
        finally:
            self._clock.restart()

    def _persistent(self, found: list[Finding]) -> list[Finding]:
        """A straggler is said once the same rank is slow in the same section at two exchanges in a
        row: a straggler is slow window after window, while a burst of machine jitter (an allocator,
        a neighbour's process) fills one window at most. Other findings pass as they are."""
        slow = {(f.evidence.get("rank"), f.evidence.get("section")) for f in found if f.id == "dist.straggler"}
        kept = [f for f in found if f.id != "dist.straggler"
                or (f.evidence.get("rank"), f.evidence.get("section")) in self._slow]
        self._slow = slow
        return kept

    # --- stall ------------------------------------------------------------------------------
    def on_stall(self, state: dict[str, Any]) -> list[Finding]:
        """The watchdog's hook, on every rank whose steps stopped: publish, read, judge.

        Bounded: the work runs on a helper thread joined within the grace plus a margin, so a
        store that does not answer costs this call at most that long.
        """
        if self._store is None or self.world < 2:
            return []
        grace = self.grace
        box: list[Finding] = []
        t = threading.Thread(target=self._stall_body, args=(dict(state), grace, box),
                             name="signalchain-rankwatch-stall", daemon=True)
        t.start()
        t.join(grace + min(5.0, grace))
        if t.is_alive():
            late = check_failed(CHECK, TimeoutError(
                f"the store did not answer within {grace:.1f} s; no other rank's state was read"))
            return self._record([late], publish=False)
        return list(box)

    def _stall_body(self, state: dict[str, Any], grace: float, box: list[Finding]) -> None:
        try:
            seq = sequence_number(self._group)
            try:
                recent = flight_record(self._labels)
            except Exception:  # the recorder is optional: the sequence number still speaks
                recent = None
            checking_call = as_pending(self.check)  # waiting in the cross-rank check of a collective
            if checking_call is not None:
                recent = [c for c in recent or [] if c.seq != checking_call.seq or c.group != "0"] + [checking_call]
            if str(state.get("phase") or "step") == "step" and self._clock.current:
                state["phase"] = self._clock.current  # the watchdog only knew "inside a step"
            mine = rank_stall(state, rank=self.rank, seq=seq, recent=recent)
            now = time.time()
            self._store.set(f"stall/{self.rank}", stall_to_json(mine, now))
            # Fresh: published after this rank's steps stopped, less the grace (peers stop a step
            # apart at most, and their watchdogs fire within the grace of this one).
            fresh_after = now - mine.since_s - grace
            states = read_states(self._store, self.world, mine, fresh_after=fresh_after,
                                 grace_s=grace)
            found = judge_stall(StallView(self.world, self.rank, states, grace))
        except Exception as exc:
            found = [check_failed(CHECK, exc)]
        # Recorded here, on the helper thread: publishing them uses the store, which may block.
        box.extend(self._record(found))

    # --- findings ---------------------------------------------------------------------------
    def _record(self, found: list[Finding], publish: bool = True) -> list[Finding]:
        """Keep new findings (one per fault, see `fault_key`), tell the callback, publish them."""
        new = []
        with self._lock:
            for f in found:
                if self._keep(f):
                    new.append(f)
        for f in new:
            if self._on_finding is not None:
                try:
                    self._on_finding(f)
                except Exception:  # a user's callback must not break the run either
                    pass
        try:
            if new and publish and self._store is not None:
                if self.rank != 0:
                    self._store.set(f"findings/{self.rank}",
                                    json.dumps([f.to_dict() for f in self.findings]))
                else:
                    self._merge_remote()
        except Exception:  # the store is best effort: findings stay local
            pass
        return found

    def _keep(self, f: Finding) -> bool:
        """Under the lock: append a new fault; for one seen before, count it on the first finding."""
        key = fault_key(f)
        at = self._seen.get(key)
        if at is None:
            self._seen[key] = len(self.findings)
            self.findings.append(f)
            return True
        old = self.findings[at]
        seen = int(old.evidence.get("seen", 1)) + 1
        last = f.evidence.get("step", old.evidence.get("last_step"))
        self.findings[at] = replace(old, evidence={**old.evidence, "seen": seen, "last_step": last})
        return False

    def _merge_remote(self) -> None:
        """On rank 0: take in the findings other ranks published (only those already there)."""
        for r in range(1, self.world):
            key = f"findings/{r}"
            if not self._store.check([key]):
                continue
            remote = [Finding.from_dict(d) for d in json.loads(self._store.get(key))]
            with self._lock:
                for f in remote:
                    if fault_key(f) not in self._seen:
                        self._keep(f)

    # --- findings of the session's own (a located NaN): rank > 0 shares, rank 0 reads -------------
    def share(self, finding: Finding) -> None:
        """On a rank > 0: hand `finding` to rank 0 (through the store; best effort, never raises)."""
        if self._store is None or self.rank == 0:
            return
        try:
            with self._lock:
                self._shared.append(finding)
                mine = list(self._shared)
            publish(self._store, self.rank, mine)
        except Exception:
            pass

    def shared(self, *, step: int | None = None, within: float = 0.0) -> list[Finding]:
        """On rank 0: what the other ranks shared so far; with `step`, waiting up to `within` seconds
        for every rank to share one of that step. Never raises (nothing read: [])."""
        if self._store is None or self.rank != 0 or self.world < 2:
            return []
        try:
            return read_shared(self._store, self.world, step=step, within=within)
        except Exception:
            return []

    def close(self) -> None:
        """Merge what other ranks published (rank 0) and destroy the side group; never hangs."""
        side, self._side, self._live = self._side, None, False
        unwatch(self._clock.collective)

        def body() -> None:
            try:
                if self.rank == 0 and self._store is not None:
                    self._merge_remote()
            except Exception:
                pass
            try:
                if side is not None and dist.is_initialized():
                    dist.destroy_process_group(side)
            except Exception:
                pass

        t = threading.Thread(target=body, name="signalchain-rankwatch-close", daemon=True)
        t.start()
        t.join(min(5.0, self.timeout))
