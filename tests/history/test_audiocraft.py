"""AudioCraft / Dora experiment folders: history.json per epoch, checkpoints by name, a cut history."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from _history_logs import audiocraft_run, curve
from signalchain.history import read


def test_checkpoint_names_as_audiocraft_writes_them(tmp_path) -> None:
    root = audiocraft_run(tmp_path / "xp", epochs=5)  # checkpoint.th, checkpoint_4.th
    (root / "checkpoint_best.th").write_bytes(b"x")  # no epoch in its name: not on the axis
    (root / "checkpoint_4.th.1").write_bytes(b"x")  # rank 1's FSDP shard of the same save
    (root / "checkpoint_5.th.tmp").write_bytes(b"x")  # the save of epoch 5's copy died
    run = read(root)
    assert [(c.step, c.complete, c.files) for c in run.checkpoints] == [
        (4, True, ["checkpoint_4.th"]),
        (5, True, ["checkpoint.th"]),
        (5, False, ["checkpoint_5.th.tmp"]),
    ]


def test_stages_become_series_on_an_epoch_axis(tmp_path) -> None:
    run = read(audiocraft_run(tmp_path / "xp", epochs=4))
    assert run.axis == "epoch" and run.sources[0].endswith("history.json")
    assert list(run.first("valid_loss").steps) == [1, 2, 3, 4] and run.first("valid_loss").name == "valid/ce"
    assert run.first("lr").name == "train/lr" and run.first("grad_norm").name == "train/grad_norm"
    assert run.series["train/ppl"].role is None


_HIST = json.dumps([{"train": {"ce": c, "ppl": math.exp(c)}, "valid": {"ce": c + 0.1}} for c in curve(12)], indent=2)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(_HIST)))
def test_any_truncation_of_history_json_reads_a_prefix_of_the_epochs(cut: int, tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("xp")
    (root / "history.json").write_text(_HIST[:cut])
    run = read(root)
    ce = run.series.get("train/ce")
    if ce is not None:
        n = len(ce)
        assert list(ce.steps) == list(range(1, n + 1)) and np.allclose(ce.values, curve(12)[:n])
    if cut < len(_HIST.rstrip()):
        assert run.notes and all(n.path.endswith("history.json") for n in run.notes)
