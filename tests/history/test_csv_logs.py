"""Lightning `metrics.csv` and W&B CSV exports that a dead or resumed run left behind."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _history_logs import curve, lightning_run
from signalchain.history import read


def _write(path, lines: list[str], end: str = "\n") -> None:
    path.write_text("\n".join(lines) + end)


def test_a_last_line_without_its_line_end_is_not_a_point(tmp_path) -> None:
    lines = ["epoch,step,train_loss"] + [f"0,{i},{v!r}" for i, v in enumerate(curve(6))]
    lines[-1] = lines[-1][:-5]  # the writer died inside the last number: `4.2` of `4.2345...`
    _write(tmp_path / "metrics.csv", lines, end="")
    run = read(tmp_path)
    assert list(run.first("train_loss").steps) == [0, 1, 2, 3, 4]
    note = next(n for n in run.notes if "no line end" in n.message)
    assert note.line == 7 and note.path.endswith("metrics.csv")


def test_a_header_written_again_by_a_resumed_run_is_skipped_with_a_note(tmp_path) -> None:
    head = "epoch,step,train_loss"
    lines = [head, "0,0,5.0", "0,1,4.0", head, "0,1,4.1", "0,2,3.0"]
    _write(tmp_path / "metrics.csv", lines)
    run = read(tmp_path)
    loss = run.first("train_loss")
    assert list(loss.steps) == [0, 1, 1, 2] and list(loss.values) == [5.0, 4.0, 4.1, 3.0]  # as logged
    assert any("header repeats" in n.message and n.line == 4 for n in run.notes)


def test_an_empty_metrics_csv_is_the_lightning_log_with_a_note(tmp_path) -> None:
    (tmp_path / "metrics.csv").write_text("")
    run = read(tmp_path)
    assert run.format == "lightning-csv" and not run.series
    assert [n.message for n in run.notes] == ["is empty"] and run.sources == [str(tmp_path / "metrics.csv")]


def test_a_column_of_text_is_no_metric_and_a_stray_word_is_a_note(tmp_path) -> None:
    lines = ["_step,_timestamp,train/loss,run"] + [f"{i},{1.7e9 + i},{v},demo" for i, v in enumerate(curve(5))]
    lines[3] = "2,1700000002.0,n/a,demo"
    _write(tmp_path / "history.csv", lines)
    run = read(tmp_path / "history.csv")
    assert run.format == "wandb-csv" and "run" not in run.series
    assert list(run.first("train_loss").steps) == [0, 1, 3, 4]
    assert any("'n/a'" in n.message and n.line == 4 for n in run.notes)


_CACHE: dict[str, bytes] = {}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(min_value=0.0, max_value=1.0))
def test_any_truncation_of_a_csvlogger_file_reads_a_prefix_of_the_points(tmp_path_factory, frac: float) -> None:
    if "data" not in _CACHE:
        folder = lightning_run(tmp_path_factory.mktemp("lt"), steps=12)
        _CACHE["data"] = (folder / "metrics.csv").read_bytes()
        whole = read(folder)
        _CACHE["loss"] = whole.series["train_loss_step"].values.tobytes()
    data = _CACHE["data"]
    full = np.frombuffer(_CACHE["loss"])
    folder = tmp_path_factory.mktemp("cut")
    (folder / "metrics.csv").write_bytes(data[: int(frac * len(data))])
    run = read(folder)
    loss = run.series.get("train_loss_step")
    if loss is not None:
        n = len(loss)
        assert list(loss.steps) == list(range(n)) and np.array_equal(loss.values, full[:n])


def test_a_broken_hparams_yaml_is_a_source_and_a_note(tmp_path) -> None:
    folder = lightning_run(tmp_path / "lt")
    (folder / "hparams.yaml").write_text("lr: [unclosed\n")
    run = read(folder)
    assert str(folder / "hparams.yaml") in run.sources and "learning_rate" not in run.config
    assert any(n.path == str(folder / "hparams.yaml") and "is not YAML" in n.message for n in run.notes)
