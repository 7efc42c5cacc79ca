"""Host reads that make the host wait for the device, per update: the pipeline's own against those
inside third-party libraries (`perf.sync_bound` @ runtime; the rule is in `checks/performance.py`'s
docstring). Counts are properties of the code, not of the machine: no load changes them."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median

from .._units import short_path
from ..findings import Finding
from ..records.performance import PerfMeasurement
from .base import make

__all__ = ["sync_bound"]

CHECK = "checks.performance"

SYNC_ABS = 32
SYNC_MIN = 8
SYNC_MODULE_SHARE = 0.25
LIBRARY_MODULE_SHARE = 1.0


_SYNC_COST = {False: "every read makes the host wait for the device to drain its queue",
              True: "on a GPU every one of them makes the host wait for the device to drain its queue"}


def _where(sites: Mapping[str, int], callers: Mapping[str, str] | None = None) -> str:
    items = list(sites.items())[:5]
    return "; ".join(f"{short_path(k)} (×{v})"
                     + (f", called from {short_path(callers[k])}" if callers and k in callers else "")
                     for k, v in items) or "?"


def sync_bound(rep: PerfMeasurement) -> list[Finding]:
    """The user's reads are judged; reads inside third-party code are the library's cost (info),
    unless they alone read once per module call on a step that reads at least `SYNC_ABS` times."""
    if not rep.syncs:
        return []
    lib = list(rep.library_syncs) if len(rep.library_syncs) == len(rep.syncs) else [0] * len(rep.syncs)
    total = median(rep.syncs)
    s = median([a - b for a, b in zip(rep.syncs, lib, strict=True)])  # the user's own reads
    ls = median(lib)
    calls = median(rep.module_calls) if rep.module_calls else 0
    out: list[Finding] = []
    if s >= SYNC_ABS or (s >= SYNC_MIN and s >= SYNC_MODULE_SHARE * calls):
        sites = list(rep.sync_sites.items())[:5]
        where = _where(rep.sync_sites)
        also = f"; {ls:g} more inside libraries" if ls else ""
        out.append(make("perf.sync_bound", "warning", "runtime",
                        f"each update reads tensor values on the host {s:g} times in the pipeline's own code (median "
                        f"of {len(rep.syncs)} updates, {calls:g} module calls{also}): "
                        f"{_SYNC_COST[rep.device.startswith('cpu')]}", CHECK,
                        hint=f"most reads come from {where}; keep values on the device (accumulate losses in tensors "
                             f"and call `.item()` once every N steps), remove per-module watchers that call "
                             f"`.item()`/`.tolist()`/`print(tensor)`, avoid `nonzero`, boolean-mask indexing and "
                             f"`.cpu()` inside the step",
                        syncs_per_update=s, library_syncs_per_update=ls, total_syncs_per_update=total,
                        module_calls_per_update=calls, ops=rep.sync_ops, sites=dict(sites), owner="user",
                        device=rep.device))
    if ls:
        dominant = ls >= SYNC_ABS and ls >= LIBRARY_MODULE_SHARE * calls
        where = _where(rep.library_sites, rep.library_callers)
        out.append(
            make(
                "perf.sync_bound",
                "warning" if dominant else "info",
                "runtime",
                f"{ls:g} of the {total:g} host reads per update happen inside third-party code"
                + (
                    f", at least one per module call ({calls:g} calls): on a GPU every layer waits for the device"
                    if dominant
                    else ": the library's own cost, not a line of this pipeline"
                ),
                CHECK,
                hint=f"they come from {where}; the library line cannot be edited here: look for a "
                "newer release or an option that avoids it, or call that code less often (e.g. "
                "precompute codec tokens outside the training step)",
                library_syncs_per_update=ls,
                total_syncs_per_update=total,
                module_calls_per_update=calls,
                sites=dict(list(rep.library_sites.items())[:5]),
                callers={
                    k: v for k, v in rep.library_callers.items() if k in dict(list(rep.library_sites.items())[:5])
                },
                owner="library",
                device=rep.device,
            )
        )
    return out
