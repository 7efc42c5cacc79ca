"""The phase rules of `monitor/_stacks.py` on synthetic stacks (outermost first, as extract_stack)."""

from __future__ import annotations

import sysconfig
import threading
import traceback

import pytest

from signalchain.monitor import _stacks
from signalchain.monitor._stacks import format_dump, resolve_phase, stack_phase, thread_stacks, user_site

SP = "/venv/lib/python3.11/site-packages"
USER = "/home/me/project/train.py"
STDLIB = sysconfig.get_paths()["stdlib"]  # wherever this interpreter keeps it


def F(path: str, line: int, name: str) -> traceback.FrameSummary:
    return traceback.FrameSummary(path, line, name, lookup_line=False)


def torch(rel: str, name: str, line: int = 10) -> traceback.FrameSummary:
    return F(f"{SP}/torch/{rel}", line, name)


MAIN = [F(USER, 100, "<module>"), F(USER, 42, "train")]
CALL = [torch("nn/modules/module.py", "_wrapped_call_impl"), torch("nn/modules/module.py", "_call_impl")]
FORWARD = MAIN + CALL + [F("/home/me/project/model.py", 7, "forward")]
BACKWARD = MAIN + [torch("_tensor.py", "backward"), torch("autograd/__init__.py", "backward"),
                   torch("autograd/graph.py", "_engine_run_backward")]
OPTIMIZER = MAIN + [torch("optim/optimizer.py", "wrapper"), torch("optim/adamw.py", "step"),
                    torch("optim/adamw.py", "_multi_tensor_adamw")]
LOADER = MAIN + [torch("utils/data/dataloader.py", "__next__"), torch("utils/data/dataloader.py", "_next_data"),
                 torch("utils/data/_utils/fetch.py", "fetch"), F("/home/me/project/data.py", 12, "__getitem__"),
                 F(f"{STDLIB}/wave.py", 300, "readframes")]
WORKERS = MAIN + [torch("utils/data/dataloader.py", "__next__"), torch("utils/data/dataloader.py", "_get_data"),
                  torch("utils/data/dataloader.py", "_try_get_data"), F(f"{STDLIB}/queue.py", 180, "get"),
                  F(f"{STDLIB}/threading.py", 331, "wait")]
SAVE = MAIN + [torch("serialization.py", "save"), torch("serialization.py", "_save"),
               F("/home/me/project/store.py", 3, "write")]
HF_SAVE = MAIN + [F(f"{SP}/transformers/trainer.py", 1, "train"),
                  F(f"{SP}/transformers/trainer.py", 2, "_save_checkpoint"),
                  F(f"{SP}/transformers/modeling_utils.py", 3, "save_pretrained"),
                  F(f"{SP}/safetensors/torch.py", 4, "save_file")]
BARRIER = MAIN + [torch("distributed/c10d_logger.py", "wrapper"), torch("distributed/distributed_c10d.py", "barrier")]
GATHER = MAIN + [torch("distributed/distributed_c10d.py", "all_gather_object"),
                 torch("distributed/distributed_c10d.py", "all_gather")]
COMPILE = MAIN + [torch("_dynamo/eval_frame.py", "_fn"), torch("_dynamo/convert_frame.py", "_compile"),
                  torch("_inductor/compile_fx.py", "compile_fx"), torch("fx/graph_module.py", "recompile")]
COMPILED_RUN = MAIN + [torch("_dynamo/eval_frame.py", "_fn"), F(USER, 60, "forward"),
                       torch("_inductor/output_code.py", "__call__")]


@pytest.mark.parametrize("frames, phase, detail", [
    (MAIN, None, None), (FORWARD, "forward", None), (BACKWARD, "backward", None), (OPTIMIZER, "optimizer", None),
    (LOADER, "loader", None), (WORKERS, "loader", "workers"), (SAVE, "checkpoint", None), (HF_SAVE, "checkpoint", None),
    (BARRIER, "collective", "barrier"), (GATHER, "collective", "all_gather_object"), (COMPILE, "compile", None),
    (COMPILED_RUN, None, None),
], ids=["none", "forward", "backward", "optimizer", "loader", "workers", "torch.save", "save_pretrained",
        "barrier", "outermost-collective", "compile", "compiled-function-running"])
def test_each_phase_is_read_from_its_frames(frames, phase, detail):
    assert stack_phase(frames) == (phase, detail)


def test_specific_phases_win_wherever_they_are():
    # torch.save called from inside forward: the save is the cause; a barrier inside the optimizer
    # (ZeRO) is a collective; compiling on the first forward is compiling.
    assert stack_phase(FORWARD + SAVE[2:])[0] == "checkpoint"
    assert stack_phase(OPTIMIZER + BARRIER[2:])[0] == "collective"
    assert stack_phase(FORWARD + COMPILE[2:])[0] == "compile"
    assert stack_phase(BARRIER + COMPILE[2:])[0] == "compile"


def test_innermost_of_forward_backward_optimizer_wins():
    # Lightning runs training_step (forward) and backward inside the optimizer's closure.
    closure = OPTIMIZER + [F(f"{SP}/lightning/pytorch/loops/optimization/automatic.py", 1, "closure")]
    assert stack_phase(closure + CALL)[0] == "forward"
    assert stack_phase(closure + BACKWARD[2:])[0] == "backward"
    assert stack_phase(FORWARD + OPTIMIZER[2:])[0] == "optimizer"


@pytest.mark.parametrize("explicit, stack, phase, source", [
    (None, None, "step", "stack"), (None, "loader", "loader", "stack"), ("forward", None, "forward", "explicit"),
    ("step", "checkpoint", "checkpoint", "stack"), ("forward", "collective", "collective", "stack"),
    ("step", "forward", "forward", "stack"), ("backward", "forward", "backward", "explicit"),
    ("compile", "forward", "compile", "explicit"), ("my_eval", "forward", "my_eval", "explicit"),
    ("loader", "forward", "loader", "explicit"), ("loader", None, "loader", "explicit"),
    ("checkpoint", "checkpoint", "checkpoint", "explicit"),
    # between two specific phases the stack wins: trainer hooks mark regions "until the next boundary"
    ("loader", "checkpoint", "checkpoint", "stack"),  # HF: a save after step end (no hook before saving)
    ("checkpoint", "loader", "loader", "stack"),  # Lightning: the fetch after on_save_checkpoint
    ("loader", "collective", "collective", "stack"), ("collective", "checkpoint", "checkpoint", "stack"),
])
def test_explicit_phase_holds_unless_the_stack_is_more_specific(explicit, stack, phase, source):
    assert resolve_phase(explicit, stack) == (phase, source)


def test_user_site_skips_libraries_stdlib_and_signalchain():
    assert user_site(LOADER) == "/home/me/project/data.py:12"
    assert user_site(WORKERS) == f"{USER}:42"
    assert user_site(HF_SAVE) == f"{USER}:42"
    ours = F(_stacks.__file__, 5, "beat")
    assert user_site(MAIN + [ours]) == f"{USER}:42"
    assert user_site([F("<frozen importlib._bootstrap>", 1, "_load")]) is None


def test_thread_stacks_sees_a_sleeping_thread_and_dumps_it():
    gate = threading.Event()
    t = threading.Thread(target=gate.wait, args=(10,), name="sleeper", daemon=True)
    t.start()
    try:
        stacks = thread_stacks(exclude=(threading.get_ident(),))
        assert threading.get_ident() not in stacks
        name, frames = stacks[t.ident]
        assert name == "sleeper" and frames[-1].name == "wait"
        text = format_dump("header line", stacks)
        assert text.startswith("header line") and "'sleeper' (most recent call first)" in text
        assert 'line' in text and frames[-1].filename in text
    finally:
        gate.set()
        t.join(5)
