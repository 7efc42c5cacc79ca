"""HF Trainer output folders: which trainer_state.json is the run, checkpoints, configuration from JSON only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _history_logs import hf_run, hf_state, write_state
from signalchain.history import read


def test_configuration_comes_from_the_json_files_never_the_pickle(tmp_path) -> None:
    root = hf_run(tmp_path / "out", steps=20)
    (root / "training_args.bin").write_bytes(b"\x80\x04not to be unpickled")
    (root / "training_args.json").write_text(
        json.dumps({"learning_rate": 3e-4, "lr_scheduler_type": "cosine", "warmup_steps": 5, "report_to": ["none"]})
    )
    # a MusicGen checkpoint's model config nests the token vocabulary under `decoder`
    (root / "checkpoint-20" / "config.json").write_text(
        json.dumps({"model_type": "musicgen", "decoder": {"vocab_size": 2048, "num_codebooks": 4}})
    )
    run = read(root)
    assert run.config["learning_rate"] == 3e-4 and run.config["lr_scheduler_type"] == "cosine"
    assert run.config["vocab_size"] == 2048 and run.config["num_codebooks"] == 4
    assert "report_to" not in run.config
    assert str(root / "training_args.bin") not in run.sources
    assert str(root / "training_args.json") in run.sources


def test_a_root_state_cut_mid_write_loses_to_the_checkpoint_that_reaches_further(tmp_path) -> None:
    root = hf_run(tmp_path / "out", steps=20, save_every=10)
    text = json.dumps(hf_state(20), indent=2, sort_keys=True)
    cut = text.index('"step": 7')
    (root / "trainer_state.json").write_text(text[:cut])  # save_state() died at the end of the run
    run = read(root)
    assert run.first("train_loss").steps.max() == 20
    assert run.config["trainer_state"].endswith("checkpoint-20/trainer_state.json")
    assert any(n.path == str(root / "trainer_state.json") and "cut mid-write" in n.message for n in run.notes)
    assert sorted(run.sources) == sorted(
        str(p)
        for p in (
            root / "trainer_state.json",
            root / "checkpoint-10/trainer_state.json",
            root / "checkpoint-20/trainer_state.json",
        )
    )


def test_train_and_eval_dicts_on_one_step_give_one_epoch_point(tmp_path) -> None:
    write_state(tmp_path / "trainer_state.json", hf_state(10, eval_every=5))
    run = read(tmp_path)
    assert list(run.first("epoch").steps) == list(range(1, 11))
    assert list(run.first("valid_loss").steps) == [5, 10]
    assert run.series["eval_runtime"].role is None  # shown, never judged
    assert run.config["train_batch_size"] == 4 and run.config["eval_steps"] == 5 and run.config["save_steps"] == 10


def test_a_checkpoint_folder_without_weights_is_incomplete(tmp_path) -> None:
    root = hf_run(tmp_path / "out", steps=30, save_every=10)
    (root / "checkpoint-20" / "model.safetensors").unlink()
    (root / "checkpoint-20" / "model.safetensors.index.json").write_text("{}")  # sharded: the index is the model
    (root / "checkpoint-30" / "model.safetensors").unlink()
    run = read(root)
    assert [(c.step, c.complete) for c in run.checkpoints] == [(10, True), (20, True), (30, False)]
    assert "trainer_state.json" in run.checkpoints[2].files


_STATE = json.dumps(hf_state(8), indent=2, sort_keys=True) + "\n"


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(_STATE.rstrip()) - 1))
def test_any_cut_of_trainer_state_says_so_in_a_note_naming_the_file(cut: int, tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("out")
    (root / "trainer_state.json").write_text(_STATE[:cut])
    run = read(root)
    assert run.notes and all(n.path == str(root / "trainer_state.json") for n in run.notes)


def test_a_state_written_by_transformers_own_trainer_state(tmp_path) -> None:
    ts = pytest.importorskip("transformers.trainer_callback")
    doc = hf_state(12, eval_every=4)
    state = ts.TrainerState(
        epoch=doc["epoch"],
        global_step=12,
        max_steps=12,
        logging_steps=1,
        eval_steps=4,
        save_steps=10,
        train_batch_size=4,
        num_train_epochs=2,
        log_history=doc["log_history"],
    )
    state.save_to_json(str(tmp_path / "trainer_state.json"))
    run = read(tmp_path)
    assert list(run.first("train_loss").steps) == list(range(1, 13))
    assert list(run.first("valid_loss").steps) == [4, 8, 12]
    assert {k: run.config[k] for k in ("max_steps", "logging_steps", "eval_steps", "train_batch_size")} == {
        "max_steps": 12,
        "logging_steps": 1,
        "eval_steps": 4,
        "train_batch_size": 4,
    }
    assert not run.notes
