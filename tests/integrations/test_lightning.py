"""`SignalchainCallback` in a real Lightning `Trainer` run (tiny model, CPU): a NaN at a known step is
located, its update withheld while the closure still ran, nothing else skipped; TensorBoard (the
trainer's own logger) and findings.json read back."""

from __future__ import annotations

import json

import pytest

L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402

from _live_models import Tiny, collate, examples, flat  # noqa: E402
from signalchain.findings import Finding  # noqa: E402
from signalchain.golden.store import load_golden  # noqa: E402
from signalchain.integrations._live import LiveSession  # noqa: E402
from signalchain.integrations.lightning import SignalchainCallback  # noqa: E402

torch.set_num_threads(1)
STEPS, BAD, RATE = 12, 7, 32000


class Lit(L.LightningModule):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.net = Tiny(seed)
        self.steps_run = 0  # training_step calls

    def training_step(self, batch, batch_idx):
        self.steps_run += 1
        out = self.net(**batch)
        self.log("train_loss", out["loss"])
        return {"loss": out["loss"], "logits": out["logits"].detach()}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Moves(L.Callback):
    def __init__(self) -> None:
        self.moved: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.before = flat(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.moved.append(not torch.equal(self.before, flat(pl_module)))


def fit(tmp_path, *, bad: int | None = BAD, seed: int = 0, tb: bool = True, accumulate: int = 1, **options):
    module = Lit(seed)
    loader = torch.utils.data.DataLoader(examples(STEPS * accumulate, bad, seed), batch_size=4, shuffle=False,
                                         collate_fn=collate)
    cb, moves = SignalchainCallback(out_dir=tmp_path / "sc", **options), Moves()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, log_every_n_steps=1,
                        logger=TensorBoardLogger(str(tmp_path), name="tb") if tb else False,
                        callbacks=[cb, moves], default_root_dir=str(tmp_path), accumulate_grad_batches=accumulate)
    trainer.fit(module, loader)
    return cb, moves.moved, module, trainer


def test_a_nan_step_is_located_and_only_its_update_withheld(tmp_path) -> None:
    sample = lambda model: (torch.sin(torch.arange(RATE // 10) / 5.0) * 0.5, RATE)  # noqa: E731
    cb, moved, module, trainer = fit(tmp_path, every=4, sample_every=6, sample_fn=sample)
    assert moved == [s != BAD for s in range(STEPS)]
    # the closure ran on the skipped step too; the replay calls training_step once more
    assert len(cb.session.monitor.reports) == 1 and module.steps_run == STEPS + 1
    first = next(f for f in cb.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["op"] == "aten.rsqrt.default"
    assert first.evidence["step"] == BAD and cb.session.monitor.fired == [BAD]
    saved = json.loads((tmp_path / "sc" / "findings.json").read_text())["findings"]
    assert [Finding.from_dict(f) for f in saved] == cb.findings

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(trainer.logger.log_dir, size_guidance={"scalars": 0, "audio": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"signalchain/loss", "signalchain/grad_norm_unclipped", "signalchain/skipped_steps",
            "signalchain/loader_wait_s", "signalchain/update_ratio", "train_loss"} <= tags
    assert [e.step for e in acc.Scalars("signalchain/grad_norm_unclipped")] == list(range(STEPS))
    skipped = {e.step: e.value for e in acc.Scalars("signalchain/skipped_steps")}
    assert skipped[BAD - 1] == 0 and skipped[BAD] == 1
    clips = acc.Audio("signalchain/sample")
    assert [c.step for c in clips] == [0, 6] and {c.sample_rate for c in clips} == {RATE}
    golden = load_golden(tmp_path / "sc" / "golden")
    assert {"x", "targets", "logits", "loss"} <= set(golden.trace.names())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_runs_raise_nothing(tmp_path, seed) -> None:
    cb, moved, _, _ = fit(tmp_path, bad=None, seed=seed, tb=False, golden=False, tensorboard=False)
    assert all(moved) and len(moved) == STEPS
    assert [f for f in cb.findings if f.severity.value != "info"] == []


def test_gradient_accumulation_is_one_verdict_per_optimizer_step(tmp_path) -> None:
    # examples() poisons micro-batch BAD of 2 * STEPS: optimizer step BAD // 2
    cb, moved, _, _ = fit(tmp_path, accumulate=2, tb=False, golden=False, tensorboard=False)
    monitor = cb.session.monitor
    assert monitor.steps == STEPS and len(monitor.history["loss"]) == STEPS and monitor.fired == [BAD // 2]
    assert moved == [i % 2 == 1 and i // 2 != BAD // 2 for i in range(2 * STEPS)]  # per batch
    first = next(f for f in cb.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["step"] == BAD // 2


def test_a_hook_that_raises_is_a_finding_and_the_run_completes(tmp_path, monkeypatch) -> None:
    def boom(self, loss, batch, output, labels):
        raise RuntimeError("injected in observe")

    monkeypatch.setattr(LiveSession, "_observe", boom)
    cb, moved, _, _ = fit(tmp_path, bad=None, tb=False, tensorboard=False)
    assert len(moved) == STEPS and all(moved)
    failed = [f for f in cb.findings if f.id == "internal.check_failed" and "injected" in f.message]
    assert len(failed) == 1  # said once, not once a step
    # without the loss the Monitor says so, and judges the step on the gradients and weights
    assert any("could not judge the loss" in f.message for f in cb.findings)
    assert "step" not in cb.session.monitor.optimizer.__dict__  # the guard was removed at the end
