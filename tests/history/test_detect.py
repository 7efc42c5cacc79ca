"""`read(path)` finds the format from what is at the path, a folder or one file, or says what it looked for."""

from __future__ import annotations

import pytest

from _history_logs import audiocraft_run, hf_run, lightning_run, tb_run
from signalchain.history import HistoryReadError, detect, read


@pytest.mark.parametrize(
    ("make", "pick", "fmt"),
    [
        (lambda p: hf_run(p), lambda r: r, "hf-trainer"),
        (lambda p: hf_run(p), lambda r: r / "trainer_state.json", "hf-trainer"),
        (lambda p: hf_run(p, root_state=False), lambda r: r, "hf-trainer"),  # a dead run: checkpoints only
        (lambda p: tb_run(p), lambda r: r, "tensorboard"),
        (lambda p: tb_run(p), lambda r: next(r.glob("events.out.tfevents.*")), "tensorboard"),
        (lambda p: lightning_run(p), lambda r: r, "lightning-csv"),
        (lambda p: lightning_run(p), lambda r: r / "metrics.csv", "lightning-csv"),
        (lambda p: audiocraft_run(p), lambda r: r, "audiocraft"),
        (lambda p: audiocraft_run(p), lambda r: r / "history.json", "audiocraft"),
    ],
)
def test_each_format_is_found_from_its_folder_or_its_file(tmp_path, make, pick, fmt) -> None:
    path = pick(make(tmp_path / "run"))
    assert detect(str(path)) == fmt
    run = read(path)
    assert run.format == fmt and run.first("train_loss") is not None and run.sources


def test_a_folder_of_runs_names_the_logs_below_it(tmp_path) -> None:
    lightning_run(tmp_path / "lightning_logs" / "version_0")
    (tmp_path / "lightning_logs" / "version_1").mkdir()
    (tmp_path / "lightning_logs" / "version_1" / "metrics.csv").write_text("epoch,step,train_loss\n")
    with pytest.raises(HistoryReadError, match=r"logs one or two folders down: version_0/metrics\.csv, version_1/"):
        read(tmp_path / "lightning_logs")


def test_a_wandb_offline_folder_says_to_install_wandb_or_export_a_csv(tmp_path) -> None:
    run_dir = tmp_path / "wandb" / "offline-run-20261204_120000-abc"
    run_dir.mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(b"\0")
    with pytest.raises(HistoryReadError, match=r"install wandb to read them, or export the run's history as CSV"):
        read(tmp_path / "wandb")
