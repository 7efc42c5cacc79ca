"""Roles across our users' naming conventions (HF Trainer, Lightning, AudioCraft, W&B, TensorBoard, ours)."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.history.roles import assign, role_of
from signalchain.records.history import RunHistory, Series


@pytest.mark.parametrize(
    ("name", "role", "codebook"),
    [
        # the training loss
        ("loss", "train_loss", None),
        ("train_loss", "train_loss", None),
        ("train/loss", "train_loss", None),
        ("train_loss_step", "train_loss", None),
        ("Loss/train", "train_loss", None),
        ("ce", "train_loss", None),
        ("train/ce", "train_loss", None),
        ("signalchain/loss", "train_loss", None),
        # the held-out loss
        ("eval_loss", "valid_loss", None),
        ("eval/loss", "valid_loss", None),
        ("val_loss", "valid_loss", None),
        ("val_loss_epoch", "valid_loss", None),
        ("valid/ce", "valid_loss", None),
        ("validation/loss", "valid_loss", None),
        # gradients, rate, scale
        ("grad_norm", "grad_norm", None),
        ("train/grad_norm", "grad_norm", None),
        ("signalchain/grad_norm_unclipped", "grad_norm", None),
        ("learning_rate", "lr", None),
        ("train/learning_rate", "lr", None),
        ("lr", "lr", None),
        ("lr-Adam", "lr", None),
        ("lr-AdamW/pg1", "lr", None),
        ("optim/lr", "lr", None),
        ("loss_scale", "loss_scale", None),
        ("scale", "loss_scale", None),
        ("signalchain/grad_scale", "loss_scale", None),
        # codebooks, as the log numbers them (assign() makes them 0-based)
        ("ce_q1", "train_codebook_loss", 1),
        ("train/ce_q4", "train_codebook_loss", 4),
        ("valid/ce_q2", "valid_codebook_loss", 2),
        ("loss_cb0", "train_codebook_loss", 0),
        ("signalchain/ce/codebook_3", "train_codebook_loss", 3),
        # speed
        ("samples_per_second", "throughput", None),
        ("train_samples_per_second", "throughput", None),
        ("it/s", "throughput", None),
        ("tokens/s", "throughput", None),
        ("time/step", "step_time", None),
        ("perf/step_time", "step_time", None),
        ("epoch", "epoch", None),
        ("train/epoch", "epoch", None),
        # shown, never judged
        ("train_runtime", None, None),  # the run's total, not a step time
        ("eval_runtime", None, None),
        ("ppl", None, None),
        ("train/ppl", None, None),
        ("signalchain/ppl/codebook_0", None, None),
        ("lr-Adam-momentum", None, None),  # LearningRateMonitor's momentum beside the rate
        ("attn/scale", None, None),
        ("eval_samples_per_second", None, None),
        ("global_step", None, None),
        ("val_acc", None, None),
        ("my_custom_metric", None, None),
    ],
)
def test_role_of_a_logged_name(name: str, role: str | None, codebook: int | None) -> None:
    got, cb, _ = role_of(name)
    assert (got, cb) == (role, codebook)


def _run(names: dict[str, int]) -> RunHistory:
    run = RunHistory(root="x", format="tensorboard")
    for name, n in names.items():
        run.add(Series(name, np.arange(n), np.ones(n)))
    return assign(run)


def test_the_per_step_series_keeps_a_role_its_epoch_mean_would_take() -> None:
    run = _run({"train_loss_step": 100, "train_loss_epoch": 5, "val_loss": 5})
    assert run.first("train_loss").name == "train_loss_step"
    assert run.series["train_loss_epoch"].role is None


def test_the_epoch_mean_is_the_curve_when_there_is_no_per_step_one() -> None:
    assert _run({"train_loss_epoch": 5}).first("train_loss").name == "train_loss_epoch"


def test_validation_every_epoch_is_preferred_to_a_sparser_evaluate_or_test_stage() -> None:
    run = _run({"valid/ce": 10, "evaluate/ce": 10, "test/loss": 1})
    assert run.first("valid_loss").name == "valid/ce"


def test_codebooks_numbered_from_one_become_zero_based() -> None:
    run = _run({"train/ce_q1": 5, "train/ce_q2": 5, "train/ce_q3": 5})
    assert [(s.name, s.codebook) for s in run.by_role("train_codebook_loss")] == [
        ("train/ce_q1", 0),
        ("train/ce_q2", 1),
        ("train/ce_q3", 2),
    ]


def test_assign_is_idempotent() -> None:
    run = _run({"train/ce_q1": 5, "train/ce_q2": 5, "loss": 5})
    before = {n: (s.role, s.codebook) for n, s in run.series.items()}
    assign(run)
    assert {n: (s.role, s.codebook) for n, s in run.series.items()} == before
