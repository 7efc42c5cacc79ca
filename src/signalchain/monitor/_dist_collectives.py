"""Time spent inside collectives, wherever they sit: synchronisation, never a section's compute.

A collective waits for the slowest rank. When it runs inside a section that is otherwise compute,
the waiting rank's section inflates: DDP broadcasts the module's buffers (a causal mask, a running
statistic) at the start of every forward (`broadcast_buffers=True`), `SyncBatchNorm` all-gathers
inside forward, a metric is all-reduced in the loop. A clean rank then looks slow in "forward" by
exactly the time it waited for the slow one, and would be named a straggler beside it.

`install()` wraps the Python-level collectives of `torch.distributed` (the names in `_WRAPPED`,
and `_broadcast_coalesced`, which DDP's buffer broadcast calls) once per process; every call made
on a watched thread on its watched group is timed (wall time less the thread's run-queue delay,
like every section) and handed to the clock that watches it (`SectionClock.collective`), which moves
that time out of the open section into the synchronising section "collective". The wrapper adds
two clock reads and a dictionary look-up to a collective; without a watcher it adds a look-up.
Collectives issued from C++ (DDP's gradient all-reduce inside backward) do not pass here: backward
is synchronising already. Names bound before `install` (`from torch.distributed import all_reduce`)
are not wrapped.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch
import torch.distributed as dist

from ._dist_timing import run_queue_delay

__all__ = ["install", "watch", "unwatch"]

_WRAPPED = ("broadcast", "all_reduce", "all_reduce_coalesced", "reduce", "all_gather", "all_gather_into_tensor",
            "all_gather_single",  # SyncBatchNorm's, off gloo
            "all_gather_object", "all_gather_coalesced", "gather", "gather_object", "scatter",
            "scatter_object_list", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
            "barrier", "monitored_barrier", "broadcast_object_list", "_broadcast_coalesced")
_MARK = "__signalchain_timed__"

# thread id -> (the group watched, or None for the default group; the callback that takes the seconds;
# a check run before each collective, or None: see `_dist_check`)
_watchers: dict[int, tuple[Any, Callable[[float], None], Any]] = {}
_local = threading.local()  # depth of timed collectives on this thread (one inside another counts once)
_lock = threading.Lock()
_installed = False


def _compiling() -> bool:
    try:
        return bool(torch.compiler.is_compiling())
    except Exception:
        return False


def _group_locator(fn: Callable[..., Any], name: str) -> tuple[int, str]:
    """Where a call of `fn` carries its group: (positional index, keyword)."""
    if name == "_broadcast_coalesced":
        return 0, "process_group"  # (process_group, tensors, buffer_size, src): a C++ binding
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return -1, "group"
    for key in ("group", "process_group"):
        if key in params:
            return params.index(key), key
    return -1, "group"


def _on_group(group: Any, watched: Any) -> bool:
    if group is None or group is watched:
        return True
    if watched is None:
        try:
            return group is dist.distributed_c10d._get_default_group()
        except Exception:
            return False
    return False


def _wrap(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    at, key = _group_locator(fn, name)

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        watcher = _watchers.get(threading.get_ident())
        if watcher is None or getattr(_local, "depth", 0) or _compiling():
            return fn(*args, **kwargs)  # under torch.compile: traced as torch's own, no graph break of ours
        group = kwargs.get(key) if key in kwargs else (args[at] if 0 <= at < len(args) else None)
        if not _on_group(group, watcher[0]):
            return fn(*args, **kwargs)
        _local.depth = 1
        t, d = perf_counter(), run_queue_delay()
        try:
            if watcher[2] is not None:  # waiting for the others' calls is synchronisation too
                _checked(watcher[2], name, args, kwargs)
            return fn(*args, **kwargs)
        finally:
            _local.depth = 0
            try:
                watcher[1](perf_counter() - t - (run_queue_delay() - d))
            except Exception:  # timing must never break the user's collective
                pass

    setattr(timed, _MARK, True)
    return timed


def _checked(check: Callable[..., None], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run the cross-rank check; only its verdict that the ranks disagree may raise into the run."""
    try:
        check(name, args, kwargs)
    except Exception as exc:
        if getattr(exc, "signalchain_verdict", False):
            raise


def install() -> bool:
    """Wrap torch.distributed's collectives (once per process); False where there is nothing to wrap."""
    global _installed
    with _lock:
        if _installed:
            return True
        if not dist.is_available():
            return False
        for name in _WRAPPED:
            fn = getattr(dist, name, None)
            if fn is None or getattr(fn, _MARK, False):
                continue
            setattr(dist, name, _wrap(fn, name))
        _installed = True
        return True


def watch(group: Any, sink: Callable[[float], None], thread: int | None = None,
          check: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None) -> None:
    """Hand the seconds of every collective `thread` (default: this one) issues on `group` to `sink`;
    with `check`, call it first (the collective's name, args, kwargs): an exception it raises with a
    true `signalchain_verdict` attribute stops the collective, any other is ignored."""
    install()
    _watchers[thread if thread is not None else threading.get_ident()] = (group, sink, check)


def unwatch(sink: Callable[[float], None]) -> None:
    """Stop handing collectives to `sink` (on whichever thread it watched)."""
    for tid, (_, s, _c) in list(_watchers.items()):
        if s == sink:
            _watchers.pop(tid, None)
