"""Each format read from logs its own writer made; auto-detection; roles on what the readers return."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _history_logs import audiocraft_run, curve, hf_run, lightning_run, tb_run
from signalchain.history import HistoryReadError, detect, read


def test_hf_trainer_output_folder(tmp_path) -> None:
    run = read(hf_run(tmp_path / "out"))
    assert run.format == "hf-trainer"
    loss = run.first("train_loss")
    assert loss is not None and loss.name == "loss" and list(loss.steps) == list(range(1, 21))
    assert np.allclose(loss.values, curve(20))
    assert run.first("valid_loss").name == "eval_loss" and list(run.first("valid_loss").steps) == [5, 10, 15, 20]
    assert run.first("lr").name == "learning_rate" and run.first("grad_norm").name == "grad_norm"
    assert run.first("epoch") is not None
    # the end-of-training summary's `train_loss` (a mean over the run) is no point of any curve
    assert "train_loss" not in run.series and run.config["train_summary"]["train_loss"] == 4.2
    assert [c.step for c in run.checkpoints] == [10, 20] and all(c.complete for c in run.checkpoints)
    assert run.config["logging_steps"] == 1 and run.config["max_steps"] == 20


def test_a_dead_hf_run_is_read_from_its_latest_checkpoint(tmp_path) -> None:
    root = hf_run(tmp_path / "out", steps=30, root_state=False)
    (root / "checkpoint-30" / "model.safetensors").unlink()  # the last save died before its weights
    run = read(root)
    assert run.first("train_loss").steps.max() == 30
    assert run.config["trainer_state"].endswith("checkpoint-30/trainer_state.json")
    assert [c.complete for c in run.checkpoints] == [True, True, False]


def test_tensorboard_events(tmp_path) -> None:
    run = read(tb_run(tmp_path / "tb"))
    assert run.format == "tensorboard"
    loss = run.first("train_loss")
    assert loss.name == "train/loss" and len(loss) == 30 and loss.wall is not None
    assert np.allclose(loss.values, curve(30), rtol=1e-6)  # float32 in the event
    assert run.first("lr").name == "train/lr"


def test_lightning_csv_logger(tmp_path) -> None:
    folder = lightning_run(tmp_path / "lt")
    assert detect(str(folder)) == "lightning-csv"
    run = read(folder)
    assert run.first("train_loss").name == "train_loss_step" and len(run.first("train_loss")) == 12
    assert list(run.first("valid_loss").steps) == [3, 7, 11]
    assert run.first("lr").name == "lr-Adam" and run.first("epoch") is not None
    assert run.config["vocab_size"] == 64


def test_audiocraft_history(tmp_path) -> None:
    run = read(audiocraft_run(tmp_path / "xp"))
    assert run.format == "audiocraft" and run.axis == "epoch"
    assert run.first("train_loss").name == "train/ce" and list(run.first("train_loss").steps) == [1, 2, 3, 4, 5]
    cbs = run.by_role("train_codebook_loss")
    assert [(s.name, s.codebook) for s in cbs] == [("train/ce_q1", 0), ("train/ce_q2", 1)]
    assert "train/ppl" in run.series and run.series["train/ppl"].role is None  # shown, never judged
    assert [c.step for c in run.checkpoints] == [4, 5]


def test_wandb_csv_export(tmp_path) -> None:
    f = tmp_path / "history.csv"
    rows = ["_step,_runtime,_timestamp,train/loss,train/loss__MIN,val/loss,run_name"]
    for i, v in enumerate(curve(10)):
        rows.append(f"{i},{i * 2.0},{1.7e9 + i * 2.0},{v},{v},{'' if i % 3 else v + 0.1},demo")
    f.write_text("\n".join(rows) + "\n")
    run = read(f)
    assert run.format == "wandb-csv"
    loss = run.first("train_loss")
    assert (
        loss.name == "train/loss" and len(loss) == 10 and loss.wall is not None and loss.wall[1] - loss.wall[0] == 2.0
    )
    assert "train/loss__MIN" not in run.series and "run_name" not in run.series
    assert list(run.first("valid_loss").steps) == [0, 3, 6, 9]


def test_non_finite_values_are_kept_as_logged(tmp_path) -> None:
    from _history_logs import hf_state, write_state

    write_state(tmp_path / "trainer_state.json", hf_state(10, nan_at=7))
    loss = read(tmp_path).first("train_loss")
    assert [math.isnan(v) for v in loss.values] == [False] * 6 + [True] * 4


def test_a_folder_with_no_log_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(HistoryReadError, match=r"holds no run log signalchain reads; looked for: trainer_state\.json"):
        read(tmp_path)
    with pytest.raises(HistoryReadError, match="no such file or folder"):
        read(tmp_path / "missing")


def test_a_wandb_offline_folder_says_how_to_read_it(tmp_path) -> None:
    run_dir = tmp_path / "offline-run-20261204_120000-abc"
    run_dir.mkdir()
    (run_dir / "run-abc.wandb").write_bytes(b"\0")
    with pytest.raises(HistoryReadError, match="wandb package"):
        read(tmp_path)
