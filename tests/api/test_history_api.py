"""`signalchain.history(run)`: the command as a function, with the command line's JSON; `signalchain.history`
is still the readers' package as well as the function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import signalchain as sc
from _history_logs import hf_state, write_state
from signalchain.errors import UsageError


def _nan_run(root: Path) -> Path:
    for s in (10, 20, 30):
        write_state(root / f"checkpoint-{s}" / "trainer_state.json", hf_state(s, nan_at=25))
        (root / f"checkpoint-{s}" / "model.safetensors").write_bytes(b"\0")
    return root


def test_history_is_the_package_and_the_function() -> None:
    from signalchain.history import read
    from signalchain.history.run import HistoryResult

    assert "history" in sc.__all__ and callable(sc.history)
    assert sc.history.read is read and sc.history.run.HistoryResult is HistoryResult


def test_the_function_gives_what_the_command_writes(tmp_path: Path, cli_json) -> None:
    run = _nan_run(tmp_path / "run")
    res = sc.history(run, golden="g", pipeline="p.py:x")
    assert not res.ok and res.pair.bad_step == 25 and (res.pair.good.step, res.pair.bad.step) == (20, 30)
    assert res.bisect == f"signalchain bisect g --checkpoints {run} --steps 20:30 --pipeline p.py:x"
    doc = json.loads(res.to_json())
    cli = cli_json("history", str(run), "--golden", "g", "--pipeline", "p.py:x")
    assert doc["findings"] == cli["findings"] and doc["bisect"] == cli["bisect"]
    assert "<img" in res.to_html()


def test_a_path_with_no_log_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        sc.history(tmp_path / "nope")
