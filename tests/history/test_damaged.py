"""A dead run's logs: read as far as they go, one note per skipped part naming file and line, never a traceback."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _history_logs import curve, hf_state, lightning_run, tb_run
from signalchain.history import read


def test_a_half_written_trainer_state_keeps_its_complete_entries(tmp_path) -> None:
    text = json.dumps(hf_state(20), indent=2, sort_keys=True)
    cut = text.index('"loss": ', text.index('"step": 12')) + 3  # inside step 13's entry
    (tmp_path / "trainer_state.json").write_text(text[:cut])
    run = read(tmp_path)
    loss = run.first("train_loss")
    assert list(loss.steps) == list(range(1, 13))
    note = next(n for n in run.notes if "cut mid-write" in n.message)
    assert note.path.endswith("trainer_state.json") and note.line is not None and note.line > 1


def test_a_truncated_event_file_keeps_the_records_before_the_cut(tmp_path) -> None:
    folder = tb_run(tmp_path / "tb", steps=40)
    f = next(folder.glob("events.out.tfevents.*"))
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 130])  # the last records go, the last kept one loses its tail
    run = read(folder)
    loss = run.first("train_loss")
    assert 35 <= len(loss) < 40 and list(loss.steps) == list(range(len(loss)))
    assert any("cut mid-write" in n.message and n.path == str(f) for n in run.notes)


def test_a_csv_whose_header_changes_mid_file_is_read_block_by_block(tmp_path) -> None:
    f = tmp_path / "metrics.csv"
    lines = ["epoch,step,train_loss"] + [f"0,{i},{v}" for i, v in enumerate(curve(5))]
    lines += ["epoch,step,train_loss,val_loss"] + [f"1,{i},{v},{v + 0.1}" for i, v in enumerate(curve(5), start=5)]
    lines += ["1,10,2.9"]  # a row cut mid-write
    lines += ["1,11,oops,3.0"]  # a cell that is not a number
    f.write_text("\n".join(lines) + "\n")
    run = read(tmp_path)
    assert run.format == "lightning-csv"
    assert list(run.first("train_loss").steps) == list(range(10))
    assert list(run.first("valid_loss").steps) == list(range(5, 10)) + [11]
    msgs = {n.line: n.message for n in run.notes}
    assert "header changes" in msgs[7] and "3 cells under a header of 4" in msgs[13] and "'oops'" in msgs[14]


def test_an_empty_or_unreadable_log_is_a_note(tmp_path) -> None:
    (tmp_path / "trainer_state.json").write_text("")
    run = read(tmp_path)
    assert not run.series and run.notes[0].message == "is empty"
    (tmp_path / "trainer_state.json").write_text("{not json at all")
    run = read(tmp_path)
    assert not run.series and "is not JSON" in run.notes[0].message


def test_a_lightning_csv_with_its_own_hparams(tmp_path) -> None:
    folder = lightning_run(tmp_path / "lt")
    (folder / "hparams.yaml").write_text("lr: [unclosed\n")
    run = read(folder)
    assert run.first("train_loss") is not None and any("is not YAML" in n.message for n in run.notes)


_STATE = json.dumps(hf_state(15), indent=2, sort_keys=True)
_TB_CACHE: dict[str, bytes] = {}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=len(_STATE)))
def test_any_truncation_of_a_trainer_state_reads_a_prefix_of_the_points(tmp_path, cut: int) -> None:
    (tmp_path / "trainer_state.json").write_text(_STATE[:cut])
    run = read(tmp_path)
    loss = run.first("train_loss")
    if loss is not None:
        n = len(loss)
        assert list(loss.steps) == list(range(1, n + 1)) and np.allclose(loss.values, curve(15)[:n])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(min_value=0.0, max_value=1.0))
def test_any_truncation_of_an_event_file_reads_a_prefix_of_the_points(tmp_path_factory, frac: float) -> None:
    if "data" not in _TB_CACHE:
        folder = tb_run(tmp_path_factory.mktemp("tb"), steps=20)
        _TB_CACHE["data"] = next(folder.glob("events.out.tfevents.*")).read_bytes()
    data = _TB_CACHE["data"]
    folder = tmp_path_factory.mktemp("cut")
    (folder / "events.out.tfevents.1.host").write_bytes(data[: int(frac * len(data))])
    run = read(folder)
    loss = run.first("train_loss")
    if loss is not None:
        n = len(loss)
        assert list(loss.steps) == list(range(n)) and np.allclose(loss.values, curve(20)[:n], rtol=1e-6)
