"""The checkpoint pair around the first bad step, and the bisect line that selects exactly it."""

from __future__ import annotations

import json

import pytest

from _history_logs import hf_state, write_state
from signalchain.findings import Finding
from signalchain.history.run import bisect_line, checkpoint_pair, diagnose, step_of
from signalchain.records.history import Checkpoint, RunHistory


def _run(steps, complete=None) -> RunHistory:
    complete = complete or [True] * len(steps)
    return RunHistory("out", "hf-trainer", checkpoints=[Checkpoint(s, f"out/checkpoint-{s}", c)
                                                         for s, c in zip(steps, complete)])


def _f(id_, sev, step) -> Finding:
    return Finding(id_, sev, "loss", "m", {"step": step})


def test_the_pair_brackets_the_first_bad_step() -> None:
    run = _run([100, 200, 300, 400])
    pair = checkpoint_pair(run, [_f("history.plateau", "warning", 1), _f("history.nonfinite", "error", 251),
                                 _f("history.loss_spike", "error", 320)])
    assert (pair.bad_step, pair.good.step, pair.bad.step) == (251, 200, 300)
    line, _ = bisect_line(run, pair, "g", "pkg.mod:pipe")
    assert line == "signalchain bisect g --checkpoints out --steps 200:300 --pipeline pkg.mod:pipe"


def test_a_moment_warning_sets_the_step_when_there_is_no_error_and_plateaus_never_do() -> None:
    run = _run([100, 200])
    assert checkpoint_pair(run, [_f("history.plateau", "warning", 1)]) is None
    assert checkpoint_pair(run, [_f("history.loss_spike", "warning", 150)]).bad.step == 200


def test_before_the_first_checkpoint_after_the_last_and_incomplete_ones() -> None:
    run = _run([100, 200, 300], [True, False, True])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 50)])
    assert pair.good is None and pair.bad.step == 100
    line, note = bisect_line(run, pair)
    assert line.endswith("--steps :100") and "GOLDEN" in line and "no checkpoint was saved before" in note
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 150)])
    assert pair.good.step == 100 and pair.bad.step == 300  # 200 lacks its weights
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 350)])
    line, note = bisect_line(run, pair)
    assert line is None and "stopped before its next save" in note


@pytest.mark.parametrize("name, step", [("epoch=1-step=500.ckpt", 500), ("ckpt_1200.pt", 1200),
                                        ("model_step-30.safetensors", 30), ("last.ckpt", None)])
def test_steps_from_checkpoint_names(name, step) -> None:
    assert step_of(name) == step


def test_diagnose_a_real_layout_end_to_end(tmp_path) -> None:
    for s in (10, 20, 30):
        write_state(tmp_path / f"checkpoint-{s}" / "trainer_state.json", hf_state(s, nan_at=25))
        (tmp_path / f"checkpoint-{s}" / "model.safetensors").write_bytes(b"\0")
    res = diagnose(tmp_path)
    assert not res.ok and res.pair.bad_step == 25 and res.bisect.endswith("--steps 20:30")
    doc = json.loads(res.to_json())
    assert doc["bisect"]["pair"]["first_unhealthy"]["step"] == 30 and doc["history"]["format"] == "hf-trainer"
    html = res.to_html()
    assert "--steps 20:30" in html and html.count("<img") >= 3 and "history.nonfinite" in html
    from signalchain.report.history_page import _marks

    assert _marks(res) == {"nonfinite @ 25": 25.0, "last healthy checkpoint 20": 20.0,
                           "first unhealthy checkpoint 30": 30.0}
