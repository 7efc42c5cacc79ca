"""`checks/stall.py`: one `perf.stall` per record, worded and staged by its phase."""

from __future__ import annotations

import json

import pytest

from signalchain.checks.stall import ESCALATE, judge_stall, phase_words
from signalchain.records.stall import StallRecord

SITE = "/home/me/project/data.py:12"


def rec(phase: str = "step", **kw) -> StallRecord:
    base = dict(since_s=31.2, timeout=30.0, step=7, phase=phase, phase_source="stack", site=SITE,
                where=f"{SITE} in __getitem__", stacks={"MainThread": [f"{SITE} in __getitem__"]}, pid=123)
    base.update(kw)
    return StallRecord(**base)


@pytest.mark.parametrize("phase, words, stage", [
    ("loader", "waiting for the data loader", "loader"), ("checkpoint", "saving a checkpoint", "runtime"),
    ("collective", "inside a collective (all_reduce)", "runtime"), ("compile", "compiling", "runtime"),
    ("optimizer", "in the optimizer", "runtime"), ("backward", "in backward", "runtime"),
    ("forward", "in forward", "runtime"), ("step", "inside the step", "runtime"),
])
def test_message_names_phase_seconds_step_and_site(phase, words, stage):
    [f] = judge_stall(rec(phase, collective="all_reduce" if phase == "collective" else None))
    assert (f.id, f.stage, f.severity.value) == ("perf.stall", stage, "warning")
    assert words in f.message and "31.2 s" in f.message and "step 7" in f.message and SITE in f.message
    assert f.hint and f.check == "checks.stall"
    ev = f.evidence
    assert (ev["phase"], ev["step"], ev["site"], ev["phase_source"]) == (phase, 7, SITE, "stack")
    assert ev["stacks"] == {"MainThread": [f"{SITE} in __getitem__"]} and ev["since_s"] == 31.2
    json.loads(f.to_json())  # the whole evidence is plain JSON


def test_hints_are_concrete_per_phase():
    [loader] = judge_stall(rec("loader"))
    assert "num_workers" in loader.hint and SITE in loader.hint
    [ckpt] = judge_stall(rec("checkpoint"))
    assert "async" in ckpt.hint and "less often" in ckpt.hint
    [coll] = judge_stall(rec("collective", collective="barrier"))
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in coll.hint and "barrier" in coll.hint
    assert coll.evidence["collective"] == "barrier"


def test_a_loader_waiting_on_its_workers_says_so():
    [f] = judge_stall(rec("loader", loader_workers=True))
    assert "worker processes are late" in f.message and "num_workers=0" in f.hint and "py-spy" in f.hint
    assert f.evidence["loader_workers"] is True


def test_a_stall_past_three_timeouts_is_an_error():
    assert judge_stall(rec(since_s=ESCALATE * 30.0 - 0.1))[0].severity.value == "warning"
    [f] = judge_stall(rec(since_s=ESCALATE * 30.0))
    assert f.severity.value == "error" and "hung" in f.hint
    [done] = judge_stall(rec(since_s=31.0, lasted_s=100.0))
    assert done.severity.value == "error" and done.evidence["lasted_s"] == 100.0 and "100.0 s" in done.message


def test_before_the_first_step_and_when_the_stack_overrode_the_code():
    [f] = judge_stall(rec("checkpoint", step=None, first_step=True, explicit_phase="step"))
    assert "before the first step" in f.message and "'step'" in f.message
    assert (f.evidence["explicit_phase"], f.evidence["first_step"]) == ("step", True)
    [g] = judge_stall(rec("forward", phase_source="explicit", explicit_phase="forward", stack_phase=None))
    assert "the code said" not in g.message and g.evidence["phase_source"] == "explicit"


def test_dump_path_and_unknown_site():
    [f] = judge_stall(rec(site=None, where=None, dump_path="/tmp/stall-1-1.txt"))
    assert f.evidence["dump"] == "/tmp/stall-1-1.txt" and "an unknown line" in f.message


def test_phase_words_for_an_unknown_phase():
    assert phase_words("evaluation") == "in evaluation"
    assert phase_words("collective") == "inside a collective"
