"""The checkpoint pair around the first bad step, and the bisect line that selects exactly it.

Layouts are real folders (bisect's own selection is run on them before a line is printed); the runs
and findings are built by hand, so these tests hold whatever the readers and the judges become.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _history_logs import hf_state, write_state
from signalchain.experiments.bisect._checkpoint_files import find_checkpoints, in_step_range
from signalchain.findings import Finding
from signalchain.history.run import bisect_line, bisect_plan, checkpoint_pair, diagnose, step_of
from signalchain.records.history import Checkpoint, RunHistory, Series


def _hf(root: Path, steps, complete=None) -> RunHistory:
    """An HF Trainer output_dir with checkpoint-N/ folders (those not complete lack their weights)."""
    complete = complete or [True] * len(steps)
    ckpts = []
    for s, c in zip(steps, complete):
        d = root / f"checkpoint-{s}"
        write_state(d / "trainer_state.json", {"global_step": s, "log_history": []})
        if c:
            (d / "model.safetensors").write_bytes(b"\0")
        ckpts.append(Checkpoint(s, str(d), c))
    return RunHistory(str(root), "hf-trainer", checkpoints=ckpts)


def _f(id_, sev, step) -> Finding:
    return Finding(id_, sev, "loss", "m", {"step": step})


def _selected(plan) -> set[str]:
    """What `signalchain bisect --checkpoints plan.folder --steps plan.steps` keeps, by bisect's own functions."""
    first, last = (int(x) for x in plan.steps.split(":"))
    return {str(f.path) for f in in_step_range(find_checkpoints(plan.folder), first, last)}


def test_the_pair_brackets_the_first_bad_step_and_the_line_selects_exactly_it(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200, 300, 400])
    pair = checkpoint_pair(run, [_f("history.plateau", "warning", 1), _f("history.nonfinite", "error", 251),
                                 _f("history.loss_spike", "error", 320)])
    assert (pair.bad_step, pair.good.step, pair.bad.step) == (251, 200, 300)
    plan, note = bisect_plan(run, pair, "g", "pkg.mod:pipe")
    assert plan.line() == f"signalchain bisect g --checkpoints {tmp_path} --steps 200:300 --pipeline pkg.mod:pipe"
    assert _selected(plan) == {pair.good.path, pair.bad.path} and note == ""
    line, note = bisect_line(run, pair)
    assert line == f"signalchain bisect GOLDEN --checkpoints {tmp_path} --steps 200:300" and "GOLDEN:" in note


def test_the_step_at_a_checkpoint_makes_it_the_first_unhealthy_one(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200, 300])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 200)])
    assert (pair.good.step, pair.bad.step) == (100, 200)


def test_a_moment_warning_sets_the_step_when_there_is_no_error_and_plateaus_never_do(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200])
    assert checkpoint_pair(run, [_f("history.plateau", "warning", 1)]) is None
    assert checkpoint_pair(run, [_f("history.loss_spike", "warning", 150)]).bad.step == 200
    # an error wins over an earlier warning; a numpy step is a step, a bool is not
    pair = checkpoint_pair(run, [_f("history.grad_explosion", "warning", 20), _f("history.nonfinite", "error",
                                                                                  np.int64(150))])
    assert (pair.bad_step, pair.finding) == (150, "history.nonfinite")
    assert checkpoint_pair(run, [_f("history.nonfinite", "error", True)]) is None


def test_no_bad_step_no_pair_and_no_line(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200])
    assert checkpoint_pair(run, []) is None
    assert checkpoint_pair(run, [_f("history.overfit_gap", "warning", 150)]) is None  # not a moment
    line, note = bisect_line(run, None)
    assert line is None and "nothing to bisect" in note


def test_before_the_first_checkpoint_there_is_no_healthy_end(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 50)])
    assert pair.good is None and pair.bad.step == 100
    line, note = bisect_line(run, pair)
    # `--steps :100` would keep one checkpoint, which bisect refuses: no line rather than one that fails
    assert line is None and "no complete checkpoint was saved before step 50" in note


def test_after_the_last_checkpoint_there_is_no_unhealthy_end(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 350)])
    assert pair.good.step == 200 and pair.bad is None
    line, note = bisect_line(run, pair)
    assert line is None and "stopped before its next save" in note


def test_incomplete_checkpoints_are_skipped_by_the_pair_and_by_the_line(tmp_path) -> None:
    run = _hf(tmp_path, [100, 200, 300], [True, False, True])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 150)])
    assert pair.good.step == 100 and pair.bad.step == 300  # 200 lacks its weights
    plan, _ = bisect_plan(run, pair)
    assert plan.steps == "100:300" and _selected(plan) == {pair.good.path, pair.bad.path}


def _files(folder: Path, names) -> RunHistory:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / n).write_bytes(b"not read: the step comes from the name")
    return RunHistory(str(folder), "tensorboard", checkpoints=[Checkpoint(step_of(n), str(folder / n)) for n in names])


def test_checkpoint_files_in_one_folder(tmp_path) -> None:
    run = _files(tmp_path / "ck", ["model_step-10.safetensors", "model_step-20.safetensors",
                                   "model_step-30.safetensors"])
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 25)])
    plan, _ = bisect_plan(run, pair)
    assert plan.folder == str(tmp_path / "ck") and plan.steps == "20:30"
    assert _selected(plan) == {pair.good.path, pair.bad.path}


def test_no_line_when_bisect_would_select_more_than_the_pair(tmp_path) -> None:
    # an EMA copy at step 30 that the history did not take for a checkpoint: `--steps 20:30` keeps it too
    run = _files(tmp_path, ["model_step-20.safetensors", "model_step-30.safetensors"])
    (tmp_path / "ema_step-30.safetensors").write_bytes(b"x")
    pair = checkpoint_pair(run, [_f("history.nonfinite", "error", 25)])
    line, note = bisect_line(run, pair)
    assert line is None
    assert "no line selects exactly steps 20 and 30" in note and "ema_step-30.safetensors" in note


def test_no_line_across_two_folders_or_for_a_format_bisect_cannot_load(tmp_path) -> None:
    run = _files(tmp_path, ["model_step-20.safetensors"])
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "model_step-30.safetensors").write_bytes(b"x")
    run.checkpoints.append(Checkpoint(30, str(tmp_path / "checkpoints" / "model_step-30.safetensors")))
    line, note = bisect_line(run, checkpoint_pair(run, [_f("history.nonfinite", "error", 25)]))
    assert line is None and "the pair lies in two folders" in note
    dora = RunHistory(str(tmp_path), "audiocraft", axis="epoch",
                      checkpoints=[Checkpoint(1, str(tmp_path / "checkpoint_1.th")),
                                   Checkpoint(2, str(tmp_path / "checkpoint_2.th"))])
    line, note = bisect_line(dora, checkpoint_pair(dora, [_f("history.nonfinite", "error", 2)]))
    assert line is None and "checkpoint_1.th: bisect --checkpoints reads" in note


@pytest.mark.parametrize("name, step", [("epoch=1-step=500.ckpt", 500), ("ckpt_1200.pt", 1200),
                                        ("model_step-30.safetensors", 30), ("last.ckpt", None)])
def test_steps_from_checkpoint_names(name, step) -> None:
    assert step_of(name) == step


def test_diagnose_uses_the_reader_and_judge_it_is_given(tmp_path) -> None:
    run = _hf(tmp_path, [10, 20, 30])
    run.add(Series("loss", np.arange(1, 31), np.r_[np.linspace(6, 3, 24), np.full(6, np.nan)], role="train_loss"))
    seen = []

    def reader(path):
        seen.append(path)
        return run

    def judge(r):
        assert r is run
        return [Finding("history.nonfinite", "error", "loss", "NaN", {"step": 25, "series": "loss", "before": ""})]

    res = diagnose(tmp_path, golden="g.golden", reader=reader, judge=judge)
    assert seen == [str(tmp_path)] and not res.ok and res.pair.bad_step == 25
    doc = json.loads(res.to_json())
    assert set(doc) >= {"signalchain", "findings", "history", "bisect"}
    assert set(doc["history"]) >= {"format", "axis", "series", "checkpoints", "notes"}
    assert doc["bisect"]["args"] == {"checkpoints": str(tmp_path), "steps": "20:30", "golden": "g.golden",
                                     "pipeline": None}
    assert doc["bisect"]["command"] == f"signalchain bisect g.golden --checkpoints {tmp_path} --steps 20:30"
    clean = diagnose(tmp_path, reader=reader, judge=lambda r: [])
    assert clean.ok and clean.pair is None and clean.bisect is None


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
