"""Count the places where the host waits for a tensor's value: the synchronisations of a step.

On an accelerator every read of a device value (`.item()`, `float(t)`, `if t:`, `.tolist()`, a
copy to the CPU) and every op whose output size depends on the data (`nonzero`, boolean-mask
indexing, `unique`, `masked_select`) makes the host wait until the device has drained its queue.
A `TorchDispatchMode` sees all of them at the aten level (`aten._local_scalar_dense`, `aten.nonzero`,
`aten._to_copy` to the CPU…), inside torch's own Python code too; a `TorchFunctionMode` adds the
reads of CPU tensors that dispatch no op (`.tolist()`, `.numpy()`, `np.asarray(t)`).

What counts depends on where the model lives:
- parameters on an accelerator: only ops reading an accelerator tensor (a true sync), in every
  phase of the update;
- parameters on the CPU (no device to wait for): every read, as the same code would sync on a GPU,
  except inside `optimizer.step()`, where torch keeps its step counters as host scalars on purpose
  (they are CPU tensors on a GPU run too, so reading them costs nothing there).

Each read is placed at the innermost frame that is neither torch nor signalchain's machinery, and
that frame's owner is kept: the user's own code, or a third-party library (a file under
site-packages/dist-packages or the standard library). A library read also keeps the user's line
that called into the library, when there is one: that line is what the user can change.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .base import Probe
from .frames import OWN_DIR, code_frames

__all__ = ["HostReads"]

_aten = torch.ops.aten
_SCALAR = {_aten._local_scalar_dense.default}
_DATA_DEPENDENT = {_aten.nonzero.default, _aten.masked_select.default, _aten._unique2.default,
                   _aten.unique_consecutive.default, _aten.unique_dim.default, _aten.repeat_interleave.Tensor}
_MASK_INDEX = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default}
_COPIES = {_aten._to_copy.default, _aten.copy_.default}
_PY_READS = {"tolist", "numpy", "__array__"}
_MAX_SITES = 4096  # stop looking up source lines past this many reads (the counts go on, as the user's)
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib")
                      if (p := sysconfig.get_paths().get(k))})
_REFERENCE_DIR = os.path.join(OWN_DIR, "reference") + os.sep
# An integration *is* the user's pipeline as signalchain sees it (its methods are what a user
# overrides): its lines are the pipeline's code, not machinery, and not a library's.
_INTEGRATIONS_DIR = os.path.join(OWN_DIR, "integrations") + os.sep


def is_library(path: str) -> bool:
    """A third-party or standard-library file: what the user runs but does not edit. (A user's own
    package installed without `-e` lives in site-packages too, and counts as a library.)"""
    path = os.path.abspath(path)
    if path.startswith(_REFERENCE_DIR):
        return False  # the bundled reference pipeline is user code wherever signalchain is installed
    parts = path.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts or path.startswith(_STDLIB_DIRS) or "<frozen" in path


def read_site(depth: int = 2) -> tuple[str, bool, str | None]:
    """(file:line of the read, whether that line is library code, the user's line that called into
    the library or None), from the innermost frame of the code signalchain ran (`code_frames`: never
    torch, signalchain's machinery, the standard library or click; an integration's frame is the
    pipeline's code)."""
    site: str | None = None
    for path, line in code_frames(sys._getframe(depth)):
        lib = not path.startswith(_INTEGRATIONS_DIR) and is_library(path)
        if site is None:
            site = f"{path}:{line}"
            if not lib:
                return site, False, None
        elif not lib:
            return site, True, f"{path}:{line}"
    return site or "?", site is not None, None


def _on_device(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def _first_tensor(args: tuple[Any, ...]) -> Any:
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


class _Dispatch(TorchDispatchMode):
    def __init__(self, owner: HostReads):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        op = None if self.owner.paused else self.owner.classify(func, args, kwargs)
        if op is not None:
            self.owner.hit(op)
        return func(*args, **kwargs)


class _Function(TorchFunctionMode):
    def __init__(self, owner: HostReads):
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _PY_READS and not self.owner.accelerator and not self.owner.in_optimizer and not self.owner.paused:
            if isinstance(_first_tensor(args), torch.Tensor):
                self.owner.hit(name)  # a CPU read that dispatches no op; on a GPU it is a copy (counted below)
        return func(*args, **(kwargs or {}))


class HostReads(Probe):
    """Counts host reads per update. Use `with reads.watch(optimizer):` around one update."""

    def __init__(self, accelerator: bool):
        super().__init__()
        self.accelerator = accelerator
        self.in_optimizer = False
        self.count = 0
        self.library = 0  # reads placed inside third-party code
        self.ops: Counter[str] = Counter()
        self.sites: Counter[str] = Counter()  # the user's own lines
        self.library_sites: Counter[str] = Counter()
        self.callers: dict[str, str] = {}  # library line -> the user's line that reached it
        self._seen = 0

    def classify(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The op's name when it makes the host wait for a value, else None."""
        if func in _COPIES:
            if not self.accelerator:
                return None
            if func is _aten._to_copy.default:
                dst = kwargs.get("device")
                to_host = dst is not None and torch.device(dst).type == "cpu"
                return "to_cpu" if to_host and _on_device(args[0]) else None
            return "copy_to_cpu" if not _on_device(args[0]) and _on_device(args[1]) else None
        if func in _MASK_INDEX:
            idx = args[1] if len(args) > 1 else ()
            if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in idx or ()):
                return None
        elif func not in _SCALAR and func not in _DATA_DEPENDENT:
            return None
        t = _first_tensor(args)
        if self.accelerator:
            return str(func.overloadpacket.__name__) if _on_device(t) else None
        return None if self.in_optimizer else str(func.overloadpacket.__name__)

    def hit(self, op: str) -> None:
        self.count += 1
        self.ops[op] += 1
        self._seen += 1
        if self._seen > _MAX_SITES:
            return
        site, library, caller = read_site()
        if library:
            self.library += 1
            self.library_sites[site] += 1
            if caller is not None:
                self.callers.setdefault(site, caller)
        else:
            self.sites[site] += 1

    @contextlib.contextmanager
    def watch(self, optimizer: torch.optim.Optimizer | None) -> Iterator[None]:
        """Count inside the block; `optimizer.step()` is marked so CPU runs can leave it out."""
        if optimizer is not None:
            self.hook(optimizer.register_step_pre_hook(lambda *a: self._phase(True)))
            self.hook(optimizer.register_step_post_hook(lambda *a: self._phase(False)))
        try:
            with _Function(self), _Dispatch(self):
                yield
        finally:
            self.in_optimizer = False
            self.remove_handles()

    def _phase(self, inside: bool) -> None:
        self.in_optimizer = inside
