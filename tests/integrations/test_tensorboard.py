"""`TensorBoardSink`: buffered scalars under `signalchain/`, audio at the given rate, a trainer's writer
left open, and an info finding (once) when tensorboard is missing."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from signalchain.integrations import _tensorboard  # noqa: E402
from signalchain.integrations._tensorboard import TensorBoardSink  # noqa: E402


def read(folder) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "audio": 0})
    acc.Reload()
    return acc


def test_scalars_wait_for_flush_and_land_under_the_prefix(tmp_path) -> None:
    found = []
    sink = TensorBoardSink(True, tmp_path / "tb", found.append)
    for step in range(3):
        sink.scalar("loss", 1.0 / (step + 1), step)
    assert not (tmp_path / "tb").exists()  # buffered: nothing touched the disk yet
    sink.flush()
    sink.scalar("loss", 0.25, 3)
    sink.close()
    events = read(tmp_path / "tb").Scalars("signalchain/loss")
    assert [e.step for e in events] == [0, 1, 2, 3]
    assert [e.value for e in events] == pytest.approx([1.0, 0.5, 1 / 3, 0.25])
    assert found == []


def test_audio_keeps_the_given_sample_rate(tmp_path) -> None:
    sink = TensorBoardSink(str(tmp_path / "tb"), None, lambda f: None)
    stereo = torch.stack([torch.sin(torch.arange(3200) / 3.0), torch.zeros(3200)]) * 0.5  # [C, L]
    sink.audio("sample", stereo, 32000, 5)
    sink.close()
    clips = read(tmp_path / "tb").Audio("signalchain/sample")
    assert [(c.step, c.sample_rate, c.length_frames) for c in clips] == [(5, 32000, 3200)]


def test_a_trainers_writer_is_used_and_left_open(tmp_path) -> None:
    writer = SummaryWriter(log_dir=str(tmp_path / "theirs"))
    sink = TensorBoardSink(True, tmp_path / "ours", lambda f: None)
    sink.retarget(writer)
    sink.scalar("grad_scale", 1024.0, 0)
    sink.close()
    writer.add_scalar("theirs", 1.0, 0)  # still open: it belongs to the trainer
    writer.close()
    acc = read(tmp_path / "theirs")
    assert {"signalchain/grad_scale", "theirs"} <= set(acc.Tags()["scalars"])
    assert not (tmp_path / "ours").exists() and sink.log_dir == tmp_path / "theirs"


def test_without_tensorboard_one_info_finding_and_nothing_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_tensorboard, "tensorboard_available", lambda: False)
    found = []
    sink = TensorBoardSink(True, tmp_path / "tb", found.append)
    sink.scalar("loss", 1.0, 0)
    sink.flush()
    sink.scalar("loss", 1.0, 1)
    sink.audio("sample", torch.zeros(10), 32000, 1)
    sink.close()
    assert [(f.id, f.severity.value) for f in found] == [("tensorboard.unavailable", "info")]
    assert not (tmp_path / "tb").exists()


def test_disabled_is_silent(tmp_path) -> None:
    found = []
    sink = TensorBoardSink(False, tmp_path / "tb", found.append)
    sink.scalar("loss", 1.0, 0)
    sink.close()
    assert found == [] and not (tmp_path / "tb").exists()


def test_lightnings_stand_in_writer_on_other_ranks_is_no_error(tmp_path) -> None:
    """Lightning gives ranks > 0 a stand-in experiment whose every attribute is a method (its `log_dir`
    too): `Path(method)` raised, an `internal.check_failed` on every non-zero rank with the default
    logger (issue 25). The stand-in is never taken as the trainer's writer, and a writer whose log
    dir is not a path is used without one."""
    pytest.importorskip("lightning")
    from lightning.fabric.loggers.logger import _DummyExperiment
    from lightning.pytorch.loggers import TensorBoardLogger

    from signalchain.integrations.lightning import _tensorboard_writer

    class Trainer:
        global_rank = 1
        loggers = [TensorBoardLogger(str(tmp_path / "tb"))]

    assert _tensorboard_writer(Trainer()) is None
    found = []
    sink = TensorBoardSink(True, tmp_path / "ours", found.append)
    sink.retarget(_DummyExperiment())
    sink.scalar("grad_scale", 1024.0, 0)
    sink.close()
    assert sink.log_dir is None and not [f for f in found if f.severity.value != "info"]
