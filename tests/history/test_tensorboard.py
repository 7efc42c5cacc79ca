"""TensorBoard event files: the writers' own files, several per run, empty ones, signalchain's own tags."""

from __future__ import annotations

import numpy as np

from _history_logs import curve, tb_run
from signalchain.history import read


def test_an_empty_event_file_is_a_note_and_the_others_are_read(tmp_path) -> None:
    folder = tb_run(tmp_path / "tb", steps=10)
    empty = folder / "events.out.tfevents.9999999999.host.1.0"
    empty.write_bytes(b"")
    run = read(folder)
    assert len(run.first("train_loss")) == 10
    assert any(n.path == str(empty) and "empty" in n.message for n in run.notes)
    assert str(empty) in run.sources and len(run.sources) == 2


def test_a_resumed_run_writing_a_second_file_continues_the_curves(tmp_path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "runs"
    for part, steps in (("a_first", range(0, 10)), ("b_resumed", range(8, 16))):  # resumed from step 8
        w = SummaryWriter(str(root / part))
        for i in steps:
            w.add_scalar("train/loss", 10.0 - i, i)
        w.close()
    run = read(root)
    loss = run.first("train_loss")
    assert list(loss.steps) == list(range(10)) + list(range(8, 16))  # as logged: step 8 twice
    assert len(run.sources) == 2 and np.all(np.diff(loss.wall) >= 0)


def test_signalchains_own_tags_get_their_roles(tmp_path) -> None:
    from signalchain.integrations._tensorboard import TensorBoardSink

    sink = TensorBoardSink(tmp_path / "tb", None, lambda f: None)
    for i, v in enumerate(curve(8)):
        sink.scalar("loss", v, i)
        sink.scalar("grad_norm_unclipped", 1.0, i)
        sink.scalar("grad_scale", 65536.0, i)
        sink.scalar("ce/codebook_0", v, i)
        sink.scalar("ce/codebook_1", v + 0.5, i)
        sink.scalar("ppl/codebook_0", 2.0, i)
    sink.close()
    run = read(tmp_path / "tb")
    assert run.first("train_loss").name == "signalchain/loss" and len(run.first("train_loss")) == 8
    assert run.first("grad_norm").name == "signalchain/grad_norm_unclipped"
    assert run.first("loss_scale").name == "signalchain/grad_scale"
    assert [(s.name, s.codebook) for s in run.by_role("train_codebook_loss")] == [
        ("signalchain/ce/codebook_0", 0),
        ("signalchain/ce/codebook_1", 1),
    ]
    assert run.series["signalchain/ppl/codebook_0"].role is None
