"""`Probe`: what every torch probe shares — a tap count, a pause for signalchain's own work, the
module path stack and the removal of every hook handle it registered.

A probe watches a step it does not own. Whatever signalchain does inside that step (copying a
tapped value to numpy, checking a gradient for NaN) is not the step's work, so a probe skips it
while `with probe.ours():` is open. Hooks a probe registers go through `probe.hook(handle)` and
are removed together by `remove_handles()` (every `with` the probes open ends with it, whatever
the step raised).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ..trace import Tap

__all__ = ["Probe"]


def _passthrough(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


class Probe:
    """The shared state and plumbing of the torch probes (see the module docstring).

    taps: taps seen through `tap_wrapper`. paused: True while signalchain's own work runs.
    modules: the dotted path of the module running now is `modules[-1]` (inside `tracking_modules`).
    """

    #: Whether the inner tap a probe wraps runs watched (a user's tap, part of the step) or paused
    #: (signalchain's own recording).
    watch_inner = False

    def __init__(self) -> None:
        self.taps = 0
        self.paused = False
        self.modules: list[str] = []
        self._handles: list[Any] = []

    # ---- our own work -------------------------------------------------------------------------

    @contextlib.contextmanager
    def ours(self) -> Iterator[None]:
        """signalchain's own work inside the watched step: the probe does not see it."""
        was = self.paused
        self.paused = True
        try:
            yield
        finally:
            self.paused = was

    # ---- taps ---------------------------------------------------------------------------------

    def on_tap(self, stage: str, value: Any) -> None:
        """What the probe does with a tapped value (runs paused). Nothing by default."""

    def tap_wrapper(self, inner: Tap | None = None) -> Tap:
        """A `tap` for the step: counts the tap, hands the value to `on_tap` (paused), then calls
        `inner` (paused too unless `watch_inner`) and returns what it returns."""
        inner = inner or _passthrough

        def probed_tap(stage: str, value: Any, /, **meta: Any) -> Any:
            self.taps += 1
            with self.ours():
                self.on_tap(stage, value)
                if not self.watch_inner:
                    return inner(stage, value, **meta)
            return inner(stage, value, **meta)

        return probed_tap

    # ---- hooks --------------------------------------------------------------------------------

    def hook(self, handle: Any) -> Any:
        """Keep a hook handle (anything with `.remove()`) for `remove_handles`."""
        self._handles.append(handle)
        return handle

    def remove_handles(self) -> None:
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()

    @contextlib.contextmanager
    def tracking_modules(self, *roots: Any) -> Iterator[None]:
        """Keep `modules[-1]` the dotted path of the module running now (global forward hooks,
        removed on exit); modules outside `roots` go by their class name."""
        names: dict[int, str] = {}
        for root in roots:
            if isinstance(root, torch.nn.Module):
                # the root's own forward (its name is "") goes by its class: it is inside a module
                names.update({id(m): n or type(m).__name__ for n, m in root.named_modules()})
        stack = self.modules

        def pre(module: torch.nn.Module, args: Any) -> None:
            stack.append(names.get(id(module), type(module).__name__))

        def post(module: torch.nn.Module, args: Any, output: Any) -> None:
            if stack:
                stack.pop()

        handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
                   torch.nn.modules.module.register_module_forward_hook(post)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """Every handle registered through `hook` is removed when the block ends, whatever it raised."""
        try:
            yield
        finally:
            self.remove_handles()
