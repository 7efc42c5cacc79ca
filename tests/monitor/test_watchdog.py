"""The stall watchdog on real stalls: a loader, a checkpoint save, a collective, and clean loops.

No assertion is about how long anything took. A stalled step holds until the watchdog has reported
it (a flag its `on_finding` sets), with a hard cap so that a broken watchdog fails instead of hanging.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import signalchain
from signalchain.monitor.watchdog import PHASES, Watchdog

THIS = os.path.abspath(__file__)
CAP = 20.0  # seconds a held step waits for the watchdog at most
T = 0.3  # the watchdog timeout of these tests


def _line(marker: str) -> int:
    lines = Path(THIS).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


def until(pred, cap: float = CAP) -> None:
    """Wait for `pred()`; past `cap` the test fails (a cap, not a timing assertion)."""
    end = time.monotonic() + cap
    while not pred():
        assert time.monotonic() < end, "the watchdog never reported"
        time.sleep(0.01)


def hold(flag: Path) -> None:
    """The stalled step: wait for the watchdog's flag file (works across processes too)."""
    end = time.monotonic() + CAP
    # one line, so that the sampled stack names it whether the stall is caught sleeping or testing the flag
    while not flag.exists() and time.monotonic() < end: time.sleep(0.01)  # noqa: E701  # hold: the stall sleeps here


HOLD = f"{THIS}:{_line('# hold: the stall sleeps here')}"


def flagging(flag: Path, step: int | None = None):
    """An `on_finding` that raises the flag on the stall after `step` (any stall when None)."""
    def on_finding(f) -> None:
        if f.id == "perf.stall" and (step is None or f.evidence["step"] == step):
            flag.touch()
    return on_finding


class SlowAt(torch.utils.data.Dataset):
    def __init__(self, k: int, flag: Path) -> None:
        self.k, self.flag = k, flag

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.k:
            hold(self.flag)
        return torch.full((2,), float(i))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_slow_getitem_is_a_loader_stall_at_the_users_line(tmp_path, workers):
    flag, k = tmp_path / "fired", 3
    loader = torch.utils.data.DataLoader(SlowAt(k, flag), batch_size=1, num_workers=workers)
    with signalchain.watchdog(timeout=T, first_timeout=CAP, on_finding=flagging(flag, k - 1)) as wd:
        for step, _batch in enumerate(loader):  # the loop waits for its batch here
            wd.beat(step)
    [f] = [f for f in wd.findings if f.evidence["step"] == k - 1]
    assert (f.id, f.stage) == ("perf.stall", "loader")
    assert (f.evidence["phase"], f.evidence["phase_source"]) == ("loader", "stack")
    assert "waiting for the data loader" in f.message and f"step {k - 1}" in f.message
    assert f.evidence["lasted_s"] >= T and "num_workers" in f.hint
    if workers == 0:  # the sleep is in this process: the user's line is the dataset's
        assert f.evidence["site"] == HOLD and HOLD in f.message and f.evidence["loader_workers"] is False
    else:  # the sleep is in a worker process: this process only shows where it waits for it
        assert f.evidence["site"] == f"{THIS}:{_line('# the loop waits for its batch here')}"
        assert any("dataloader.py" in fr for fr in f.evidence["stacks"]["MainThread"])
        assert f.evidence["loader_workers"] is True and "worker processes are late" in f.message
        assert "num_workers=0" in f.hint


class SlowFile(io.BytesIO):
    def __init__(self, flag: Path) -> None:
        super().__init__()
        self.flag = flag

    def write(self, data) -> int:
        hold(self.flag)
        return super().write(data)


@pytest.mark.parametrize("explicit", [None, "step"])
def test_a_slow_checkpoint_save_is_named_as_saving_a_checkpoint(tmp_path, explicit):
    flag = tmp_path / "fired"
    torch.save({"w": torch.zeros(3)}, io.BytesIO())  # first-call imports happen before the clock runs
    with signalchain.watchdog(timeout=T, on_finding=flagging(flag), dump_dir=tmp_path / "dumps") as wd:
        wd.beat(5)
        wd.set_phase(explicit)
        torch.save({"w": torch.zeros(3)}, SlowFile(flag))
        wd.beat(6)
    [f] = [f for f in wd.findings if f.id == "perf.stall"]
    assert (f.stage, f.evidence["phase"], f.evidence["phase_source"]) == ("runtime", "checkpoint", "stack")
    assert "saving a checkpoint" in f.message and f.evidence["site"] == HOLD and f.evidence["step"] == 5
    assert f.evidence["explicit_phase"] == explicit and f.evidence["stack_phase"] == "checkpoint"
    assert any("serialization.py" in fr and fr.endswith(" in save") for fr in f.evidence["stacks"]["MainThread"])
    dump = Path(f.evidence["dump"])
    assert dump.name == f"stall-{os.getpid()}-1.txt" and dump.parent == tmp_path / "dumps"
    text = dump.read_text()
    assert "'MainThread' (most recent call first)" in text and f'File "{THIS}", line {HOLD.rsplit(":", 1)[1]}' in text


def test_an_explicit_phase_holds_when_the_stack_says_nothing_more(tmp_path):
    flag = tmp_path / "fired"
    with signalchain.watchdog(timeout=T, on_finding=flagging(flag)) as wd:
        wd.beat(0)
        with wd.phase("backward"):
            hold(flag)
        wd.beat(1)
    [f] = wd.findings
    assert (f.evidence["phase"], f.evidence["phase_source"], f.evidence["site"]) == ("backward", "explicit", HOLD)
    assert "in backward" in f.message


def test_phases_nest_and_restore():
    wd = Watchdog(60.0)
    assert "step" in PHASES and "idle" in PHASES
    with wd.phase("forward"):
        with wd.phase("collective"):
            assert wd.snapshot()["phase"] == "collective"
        assert wd.snapshot()["phase"] == "forward"
    assert wd.snapshot()["phase"] == "step"


_RANK = """
import json, os, sys, time
import torch, torch.distributed as dist
import signalchain
rank, store, flag, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
t = torch.ones(4)
dist.all_reduce(t)  # both ranks are connected
if rank == 0:
    def on_finding(f):
        if f.id == "perf.stall":
            open(flag, "w").close()
    with signalchain.watchdog(timeout=%r, on_finding=on_finding) as wd:
        wd.beat(0)
        dist.all_reduce(t)  # rank 0 waits here
        wd.beat(1)
    with open(out, "w") as fh:
        json.dump([f.to_dict() for f in wd.findings], fh)
else:
    end = time.monotonic() + %r
    while not os.path.exists(flag) and time.monotonic() < end:
        time.sleep(0.01)  # rank 1 is late
    dist.all_reduce(t)
dist.destroy_process_group()
"""


def test_a_hang_inside_a_collective_names_it(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(_RANK % (T, CAP))
    line = next(i for i, s in enumerate(script.read_text().splitlines(), 1) if s.endswith("# rank 0 waits here"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(signalchain.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]),
               GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"), OMP_NUM_THREADS="1")
    out = tmp_path / "findings.json"
    args = [str(tmp_path / "store"), str(tmp_path / "fired"), str(out)]
    procs = [subprocess.Popen([sys.executable, str(script), str(r), *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in (0, 1)]
    try:
        logs = [p.communicate(timeout=90)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:  # a hard stop: nothing outlives the test
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert [p.returncode for p in procs] == [0, 0], logs
    [f] = [f for f in json.loads(out.read_text()) if f["id"] == "perf.stall"]
    ev = f["evidence"]
    assert (f["stage"], ev["phase"], ev["collective"], ev["site"]) == ("runtime", "collective", "all_reduce",
                                                                        f"{script}:{line}")
    assert "inside a collective (all_reduce)" in f["message"] and "TORCH_DISTRIBUTED_DEBUG" in f["hint"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clean_loop_raises_nothing(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(200, 8)), batch_size=4)
    # The timeout is far above a step of this model on any machine: a tiny model, no sleeps.
    with signalchain.watchdog(timeout=30.0) as wd:
        for step, (x,) in enumerate(loader):
            with wd.phase("forward"):
                loss = model(x).pow(2).mean()
            with wd.phase("backward"):
                loss.backward()
            opt.step()
            opt.zero_grad()
            wd.beat(step)
    assert step == 49 and wd.findings == [] and wd.stalls == 0
    assert not wd.running and not any(t.name.startswith("signalchain-watchdog") and t.is_alive()
                                      for t in threading.enumerate())


def test_a_beat_rearms_two_stalls_make_two_findings():
    with signalchain.watchdog(timeout=T) as wd:
        wd.beat(0)
        until(lambda: wd.stalls == 1)
        wd.beat(1)
        until(lambda: wd.stalls == 2)
        wd.beat(2)
    assert [f.evidence["step"] for f in wd.findings] == [0, 1]
    assert all(f.evidence["lasted_s"] >= T for f in wd.findings)
    assert [f.evidence["episode"] for f in wd.findings] == [1, 2]


def test_one_long_stall_is_one_finding_and_turns_error_past_three_timeouts():
    seen = []
    with signalchain.watchdog(timeout=T, on_finding=seen.append) as wd:
        wd.beat(0)
        until(lambda: wd.findings and wd.findings[0].severity.value == "error")
        wd.beat(1)
    [f] = wd.findings
    assert wd.stalls == 1 and f.severity.value == "error" and f.evidence["lasted_s"] >= 3 * T
    assert [g.severity.value for g in seen] == ["warning", "error"]  # told once more when it became a hang


def test_before_the_first_beat_first_timeout_applies(tmp_path):
    flag = tmp_path / "fired"
    with signalchain.watchdog(timeout=CAP, first_timeout=T, on_finding=flagging(flag)) as wd:
        hold(flag)
        wd.beat(0)
    [f] = wd.findings
    assert f.evidence["first_step"] is True and f.evidence["step"] is None and "before the first step" in f.message
    assert f.evidence["timeout_s"] == T


def test_stall_hooks_get_the_state_and_may_add_findings():
    from signalchain.checks.base import make

    states = []

    def hook(state):
        states.append(state)
        return [make("dist.desync", "error", "runtime", "rank 1 never arrived", "test")]

    with signalchain.watchdog(timeout=T, stall_hooks=[hook]) as wd:
        wd.beat(0)
        until(lambda: len(states) == 1)
        wd.beat(1)
        until(lambda: len(states) == 2)
        wd.beat(2)
    assert set(states[0]) == {"step", "phase", "since_s", "site", "where", "stacks", "pid", "thread"}
    s = states[0]
    assert (s["step"], s["pid"], s["thread"], s["phase"]) == (0, os.getpid(), "MainThread", "step")
    assert s["since_s"] >= T and s["site"].startswith(THIS + ":") and s["where"].startswith(THIS + ":")
    assert "MainThread" in s["stacks"] and not any(k.startswith("signalchain-watchdog") for k in s["stacks"])
    assert [f.id for f in wd.findings].count("dist.desync") == 1  # the same finding twice is kept once
    assert [f.id for f in wd.findings].count("perf.stall") == 2


def test_a_raising_hook_or_callback_becomes_a_finding_and_the_watchdog_goes_on():
    def bad_hook(state):
        raise RuntimeError("hook broke")

    def bad_callback(f):
        raise ValueError("callback broke")

    with signalchain.watchdog(timeout=T, stall_hooks=[bad_hook], on_finding=bad_callback) as wd:
        for step in range(2):
            wd.beat(step)
            until(lambda n=step + 1: wd.stalls == n)
        wd.beat(2)
    ids = [f.id for f in wd.findings]
    assert ids.count("perf.stall") == 2 and "internal.check_failed" in ids
    failed = " ".join(f.message for f in wd.findings if f.id == "internal.check_failed")
    assert "hook broke" in failed and "callback broke" in failed


def test_a_hook_that_blocks_does_not_take_the_watchdog_with_it():
    gate = threading.Event()
    wd = Watchdog(T, stall_hooks=[lambda state: gate.wait(CAP) and []], hook_timeout=T)
    with wd:
        wd.beat(0)
        until(lambda: any("ran past" in f.message for f in wd.findings))
        wd.beat(1)
        until(lambda: wd.stalls == 2)  # still watching while the first hook is stuck
        wd.beat(2)
    gate.set()
    assert [f.id for f in wd.findings].count("perf.stall") == 2


def test_idle_reports_nothing_and_the_clock_restarts_after_it():
    with signalchain.watchdog(timeout=T) as wd:
        wd.beat(0)
        wd.set_phase("idle")
        start = time.monotonic()
        until(lambda: time.monotonic() - start > 4 * T)  # waiting on purpose, e.g. an evaluation
        assert wd.findings == []
        wd.set_phase(None)
        until(lambda: wd.stalls == 1)
        wd.beat(1)
    [f] = wd.findings
    assert f.evidence["step"] == 0 and f.evidence["phase"] == "step"


def test_the_watched_thread_is_the_one_that_beats():
    release = threading.Event()
    with signalchain.watchdog(timeout=T) as wd:
        def worker():
            wd.beat(10)  # from now on this thread is watched
            release.wait(CAP)

        t = threading.Thread(target=worker, name="trainer-thread")
        t.start()
        until(lambda: wd.stalls == 1)
        release.set()
        t.join(CAP)
    [f] = wd.findings
    assert f.evidence["thread"] == "trainer-thread" and f.evidence["step"] == 10
    assert f.evidence["where"].endswith(" in wait") and "trainer-thread" in f.evidence["stacks"]


def test_a_watched_thread_that_ended_is_not_stalled():
    wd = Watchdog(T)
    t = threading.Thread(target=lambda: (wd.start(), wd.beat(0)), name="short-lived")
    t.start()
    t.join(CAP)
    try:
        mark = time.monotonic()
        until(lambda: time.monotonic() - mark > 4 * T)  # the loop finished without stop(): no false alarm
        assert wd.stalls == 0 and wd.findings == []
    finally:
        wd.stop()
    assert not wd.running


def test_import_signalchain_stays_cheap_and_watchdog_is_public():
    code = "import signalchain, sys; assert 'torch' not in sys.modules; print('watchdog' in signalchain.__all__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(Path(signalchain.__file__).parents[1])))
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    wd = signalchain.watchdog(timeout=60.0)
    try:
        assert isinstance(wd, signalchain.Watchdog) and wd.running and wd.poll == 1.0
    finally:
        wd.stop()
    with pytest.raises(ValueError, match="timeout must be a positive"):
        Watchdog(0)


class Held(torch.nn.Module):
    def __init__(self, flag: Path) -> None:
        super().__init__()
        self.flag, self.lin = flag, torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hold(self.flag)
        return self.lin(x)


def test_a_slow_forward_is_read_from_the_stack(tmp_path):
    flag = tmp_path / "fired"
    model = Held(flag)
    with signalchain.watchdog(timeout=T, on_finding=flagging(flag)) as wd:
        wd.beat(0)
        model(torch.zeros(1, 2)).sum().backward()
        wd.beat(1)
    [f] = wd.findings
    assert (f.evidence["phase"], f.evidence["phase_source"], f.evidence["site"]) == ("forward", "stack", HOLD)
    assert f.stage == "runtime" and "in forward" in f.message


def test_a_dump_that_cannot_be_written_costs_the_dump_not_the_finding(tmp_path):
    flag, not_a_dir = tmp_path / "fired", tmp_path / "file"
    not_a_dir.write_text("")
    with signalchain.watchdog(timeout=T, on_finding=flagging(flag), dump_dir=not_a_dir / "dumps") as wd:
        wd.beat(0)
        hold(flag)
        wd.beat(1)
    stall = [f for f in wd.findings if f.id == "perf.stall"]
    assert len(stall) == 1 and "dump" not in stall[0].evidence
    assert [f.id for f in wd.findings].count("internal.check_failed") == 1
