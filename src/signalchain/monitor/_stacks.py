"""Read a thread's Python stack: which phase of a training step it is in, and the user's own line.

Pure functions over frame summaries (anything with `filename`, `lineno`, `name`, outermost first
as `traceback.extract_stack` gives them), so that the rules are tested on synthetic stacks; the one
impure function, `thread_stacks`, only collects them.

Phase rules, most specific first. The four that name a cause outside the model's arithmetic win
wherever they are in the stack, in this order: `compile` (dynamo/inductor/AOT compiling, not a
compiled function running), `collective` (torch.distributed's collectives, and the rendezvous of
`init_process_group`), `checkpoint` (torch.save, safetensors, save_pretrained, Lightning's and
numpy's savers) and `loader` (anything under torch/utils/data, which also covers a Dataset's
`__getitem__` called from its fetcher; "workers" when the batch is awaited from worker processes,
whose stacks this process cannot see). Then `optimizer`, `backward` and `forward`: the innermost
of those wins, because trainers nest them (Lightning runs forward and backward inside the
optimizer's closure; activation checkpointing runs forward inside backward).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import traceback
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["FrameLike", "SPECIFIC", "COLLECTIVES", "stack_phase", "resolve_phase", "user_site",
           "format_frame", "is_library", "is_ours", "thread_stacks", "format_dump"]


class FrameLike(Protocol):
    filename: str
    lineno: int | None
    name: str


COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier", "send",
    "recv", "isend", "irecv", "send_object_list", "recv_object_list", "batch_isend_irecv", "gather",
    "gather_object", "scatter", "scatter_object_list", "wait", "wait_tensor", "init_process_group",
    "new_group", "destroy_process_group",
})
# Phases that name a cause outside the step's arithmetic; they beat an explicit "step"/"forward".
SPECIFIC = ("compile", "collective", "checkpoint", "loader")
_RANK = {None: 0, "step": 0, "idle": 0, "forward": 1, "backward": 2, "optimizer": 2,
         "loader": 3, "checkpoint": 3, "collective": 3, "compile": 3}

# Files that run while torch compiles (not while a compiled function runs: eval_frame.py wraps every
# call of a compiled function, and inductor's output_code/runtime run the compiled kernels).
_COMPILE = ("/torch/_dynamo/convert_frame.py", "/torch/_dynamo/symbolic_convert.py",
            "/torch/_dynamo/output_graph.py", "/torch/_dynamo/variables/", "/torch/_dynamo/backends/",
            "/torch/_inductor/compile_fx", "/torch/_inductor/graph.py", "/torch/_inductor/scheduler.py",
            "/torch/_inductor/lowering.py", "/torch/_inductor/codegen/", "/torch/_inductor/codecache.py",
            "/torch/_inductor/async_compile.py", "/torch/_inductor/select_algorithm.py",
            "/torch/_inductor/fx_passes/", "/torch/_functorch/aot_autograd.py",
            "/torch/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py",
            "/torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py", "/torch/export/")
_SAVERS = (("/torch/serialization.py", {"save", "_save", "_legacy_save"}),
           ("/safetensors/", {"save_file", "save", "save_model", "_flatten"}),
           ("/transformers/", {"save_pretrained", "_save_checkpoint", "_save", "save_model", "save_state"}),
           ("/lightning/", {"save_checkpoint", "_save_checkpoint"}),
           ("/pytorch_lightning/", {"save_checkpoint", "_save_checkpoint"}),
           ("/lightning_fabric/", {"save_checkpoint", "save"}),
           ("/numpy/", {"save", "savez", "savez_compressed", "_savez", "savetxt"}),
           ("/torch/distributed/checkpoint/", {"save", "async_save", "save_state_dict"}))

# `_MultiProcessingDataLoaderIter` waits for a worker's batch in these.
_WORKER_WAITS = frozenset({"_get_data", "_try_get_data"})

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_REFERENCE_DIR = os.path.join(_OWN_DIR, "reference") + os.sep
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib")
                      if (p := sysconfig.get_paths().get(k))})


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def format_frame(frame: FrameLike) -> str:
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _collective(frames: Sequence[FrameLike]) -> str | None:
    # The outermost collective is the one the user (or DDP, or a trainer) called; inner ones are
    # its implementation (all_gather_object calls all_gather).
    for f in frames:
        path = _norm(f.filename)
        if "/torch/distributed/" in path and f.name in COLLECTIVES and "c10d_logger" not in path:
            return f.name
    return None


def _saving(frame: FrameLike) -> bool:
    path = _norm(frame.filename)
    return any(part in path and frame.name in names for part, names in _SAVERS)


def stack_phase(frames: Sequence[FrameLike]) -> tuple[str | None, str | None]:
    """(the phase the stack shows or None, a detail: the collective's function name for a
    collective, "workers" for a loader waiting on its worker processes, else None)."""
    paths = [_norm(f.filename) for f in frames]
    if any(part in p for p in paths for part in _COMPILE):
        return "compile", None
    name = _collective(frames)
    if name is not None:
        return "collective", name
    if any(_saving(f) for f in frames):
        return "checkpoint", None
    loader = [f for f, p in zip(frames, paths) if "/torch/utils/data/" in p]
    if loader:
        workers = any(f.name in _WORKER_WAITS and f.filename.endswith("dataloader.py") for f in loader)
        return "loader", ("workers" if workers else None)
    for f, p in zip(reversed(frames), reversed(paths)):
        if "/torch/optim/" in p or ("/torch/amp/grad_scaler.py" in p and f.name == "step"):
            return "optimizer", None
        if f.name == "backward" and (p.endswith("/torch/_tensor.py") or p.endswith("/torch/autograd/__init__.py")):
            return "backward", None
        if p.endswith("/torch/nn/modules/module.py") and f.name in ("_call_impl", "_wrapped_call_impl"):
            return "forward", None
    return None, None


def resolve_phase(explicit: str | None, stack: str | None) -> tuple[str, str]:
    """(phase, "explicit" or "stack"). The explicit phase holds unless the stack says something more
    specific: explicit "step" but the thread is in torch.save is a checkpoint stall.

    A specific phase the stack shows (`SPECIFIC`) also beats a different specific explicit one: an
    explicit phase names a region that was entered, the stack what the thread does now, and trainer
    hooks can only mark regions "until the next boundary". HF has no hook before a save, so its save
    runs inside the "loader" marked at step end; Lightning's next fetch runs inside the "checkpoint"
    marked at on_save_checkpoint. Between the model's own phases (forward/backward/optimizer) the
    explicit one still holds, because those stacks nest (Lightning's closure)."""
    if explicit is None:
        return (stack or "step"), "stack"
    if stack is not None and stack != explicit and (
            _RANK.get(stack, 0) > _RANK.get(explicit, 3) or (stack in SPECIFIC and explicit in SPECIFIC)):
        return stack, "stack"
    return explicit, "explicit"


def is_ours(path: str) -> bool:
    """signalchain's own machinery (the bundled reference pipeline is a user's code, not ours)."""
    path = os.path.abspath(path)
    return path.startswith(_OWN_DIR) and not path.startswith(_REFERENCE_DIR)


def is_library(path: str) -> bool:
    """Standard library, site-packages or frozen/generated code: what the user runs but does not edit."""
    if path.startswith("<"):
        return True
    parts = _norm(os.path.abspath(path)).split("/")
    return "site-packages" in parts or "dist-packages" in parts or os.path.abspath(path).startswith(_STDLIB_DIRS)


def user_site(frames: Sequence[FrameLike]) -> str | None:
    """"path:line" of the innermost frame of the user's own code, or None when there is none."""
    for f in reversed(frames):
        if not is_library(f.filename) and not is_ours(f.filename):
            return f"{f.filename}:{f.lineno}"
    return None


def thread_stacks(exclude: Iterable[int] = ()) -> dict[int, tuple[str, list[traceback.FrameSummary]]]:
    """{thread ident: (thread name, frames outermost first)} for every Python thread but `exclude`.

    Source lines are not read (no file I/O while the run may be stuck on its disk)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    skip = set(exclude)
    out: dict[int, tuple[str, list[traceback.FrameSummary]]] = {}
    for ident, frame in sys._current_frames().items():
        if ident in skip:
            continue
        summary = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
        out[ident] = (names.get(ident, f"thread-{ident}"), list(reversed(summary)))
    return out


def format_dump(header: str, stacks: dict[int, tuple[str, list[traceback.FrameSummary]]]) -> str:
    """Every thread's stack as plain text, most recent call first (as faulthandler writes it)."""
    lines = [header, ""]
    for ident, (name, frames) in stacks.items():
        lines.append(f"Thread 0x{ident:x} {name!r} (most recent call first):")
        lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}' for f in reversed(frames)]
        lines.append("")
    return "\n".join(lines)
