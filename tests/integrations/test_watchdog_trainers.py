"""The stall watchdog inside real trainers (HF `Trainer`, Lightning; tiny model, CPU): each stall is
named as what it is, evaluation is progress, clean runs are silent, and the run always completes.

No assertion is about how long anything took. A stalled fetch or save holds until the callback has a
`perf.stall` finding (the watchdog reports from its own thread), with a hard cap, so that a broken
watchdog fails the test instead of hanging it. The first step gets a long `first_timeout`: one-time
work (imports, the golden batch) is not what these tests are about.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402

from _live_models import Tiny, collate, examples  # noqa: E402
from signalchain.integrations import hf_trainer, lightning  # noqa: E402

torch.set_num_threads(1)
THIS = os.path.abspath(__file__)
CAP = 20.0  # seconds a held fetch or save waits for the watchdog at most
T = 0.5  # the watchdog timeout of the stall tests
FIRST = 60.0  # before the first step: far above any first step, so only the injected stall fires


def _line(marker: str) -> int:
    lines = Path(THIS).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


class Reported:
    """Whether the callback (set after it is built) has a `perf.stall` finding yet."""

    cb: object = None

    def __call__(self) -> bool:
        return any(f.id == "perf.stall" for f in getattr(self.cb, "findings", []))


def hold(reported: Reported) -> None:
    """The stall: wait until the watchdog has reported it (at most CAP)."""
    end = time.monotonic() + CAP
    while not reported() and time.monotonic() < end:
        time.sleep(0.01)  # hold: the stall sleeps here


HOLD = f"{THIS}:{_line('# hold: the stall sleeps here')}"


class SlowAt(torch.utils.data.Dataset):
    """`examples` by index; fetching index `k` stalls until the watchdog reports; `pause` seconds
    per item otherwise (a slow-ish evaluation)."""

    def __init__(self, items: list[dict], k: int | None = None, reported: Reported | None = None,
                 pause: float = 0.0) -> None:
        self.items, self.k, self.reported, self.pause = items, k, reported, pause
        self.fetched = 0

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        self.fetched += 1
        if i == self.k and self.reported is not None:
            hold(self.reported)
        if self.pause:
            time.sleep(self.pause)
        return self.items[i]


def stalls(cb) -> list:
    """The stall findings, first the injected one; nothing else may be found (no internal failure).
    A loaded machine may add a later stall of its own, so only the first one is asserted on."""
    assert {f.id for f in cb.findings} <= {"perf.stall"}, [f.message for f in cb.findings]
    return [f for f in cb.findings if f.id == "perf.stall"]


def written(out: Path) -> list[dict]:
    data = json.loads((out / "findings.json").read_text())
    return data["findings"] if isinstance(data, dict) else data


# ---- HF Trainer --------------------------------------------------------------------------------

def hf_train(tmp_path, data, *, steps: int = 6, batch: int = 1, eval_data=None, eval_steps: int = 0,
             save_steps: int = 0, reported: Reported | None = None, **options):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=steps, per_device_train_batch_size=batch,
        per_device_eval_batch_size=1, learning_rate=0.05, lr_scheduler_type="constant", logging_steps=1,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, save_only_model=True,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps or None, disable_tqdm=True,
        dataloader_num_workers=0, train_sampling_strategy="sequential", seed=0)
    options = {"first_timeout": FIRST, "golden": False, "tensorboard": False, **options}
    cb = hf_trainer.SignalchainCallback(out_dir=tmp_path / "sc", **options)
    if reported is not None:
        reported.cb = cb
    trainer = transformers.Trainer(model=Tiny(0), args=args, train_dataset=data, eval_dataset=eval_data,
                                   data_collator=collate, callbacks=[cb])
    trainer.train()
    return cb, trainer


def test_hf_a_stalled_loader_is_a_loader_stall_at_the_datasets_line(tmp_path) -> None:
    reported = Reported()
    cb, trainer = hf_train(tmp_path, SlowAt(examples(6), k=3, reported=reported), reported=reported,
                           watchdog_timeout=T)
    assert trainer.state.global_step == 6  # the run went on after the stall
    f = stalls(cb)[0]
    assert (f.stage, f.evidence["phase"], f.evidence["site"]) == ("loader", "loader", HOLD)
    # HF fetches a step's batches before on_step_begin, and accelerate's loader one batch ahead: the
    # fetch of item 3 follows the end of step 1 (or of step 2 without the look-ahead)
    assert f.evidence["step"] in (1, 2) and f.evidence["loader_workers"] is False
    assert "waiting for the data loader" in f.message and HOLD in f.message
    assert "perf.stall" in [g["id"] for g in written(tmp_path / "sc")]


def test_hf_a_slow_checkpoint_save_is_saving_a_checkpoint(tmp_path, monkeypatch) -> None:
    import safetensors.torch

    reported, real = Reported(), safetensors.torch.save_file

    def slow_save_file(*a, **kw):  # the Trainer writes a plain module's weights with this
        hold(reported)
        return real(*a, **kw)

    monkeypatch.setattr(safetensors.torch, "save_file", slow_save_file)
    cb, trainer = hf_train(tmp_path, SlowAt(examples(6)), save_steps=3, reported=reported, watchdog_timeout=T)
    assert trainer.state.global_step == 6 and (tmp_path / "checkpoint-3" / "model.safetensors").exists()
    f = stalls(cb)[0]
    assert (f.stage, f.evidence["phase"], f.evidence["phase_source"]) == ("runtime", "checkpoint", "stack")
    # HF has no hook before a save: the session said "loader" (after step end), the stack says saving
    assert (f.evidence["explicit_phase"], f.evidence["stack_phase"]) == ("loader", "checkpoint")
    assert f.evidence["site"] == HOLD and f.evidence["step"] == 2 and "saving a checkpoint" in f.message
    assert "perf.stall" in [g["id"] for g in written(tmp_path / "sc")]


def test_hf_a_long_evaluation_of_quick_batches_is_progress_not_a_stall(tmp_path) -> None:
    timeout = 1.0
    evals = SlowAt(examples(2, seed=1), pause=timeout / 4)  # 8 batches of >= T/4: each eval is >= 2 T
    cb, trainer = hf_train(tmp_path, SlowAt(examples(4)), steps=4, eval_data=evals, eval_steps=2,
                           watchdog_timeout=timeout)
    assert trainer.state.global_step == 4
    assert evals.fetched == 16 and sum("eval_loss" in h for h in trainer.state.log_history) == 2
    assert stalls(cb) == [] and cb.findings == []


def test_hf_a_clean_run_with_a_short_timeout_raises_nothing(tmp_path) -> None:
    cb, trainer = hf_train(tmp_path, SlowAt(examples(12)), steps=12, batch=4, watchdog_timeout=2.0,
                           golden=True, tensorboard=True)
    assert trainer.state.global_step == 12 and cb.findings == []
    assert written(tmp_path / "sc") == []


# ---- Lightning ---------------------------------------------------------------------------------

class Lit(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = Tiny(0)

    def training_step(self, batch, batch_idx):
        return self.net(**batch)["loss"]

    def validation_step(self, batch, batch_idx):
        return self.net(**batch)["loss"]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def lit_fit(tmp_path, data, *, steps: int = 6, batch: int = 1, checkpoint_every: int = 0, val_data=None,
            val_every: int = 0, reported: Reported | None = None, **options):
    options = {"first_timeout": FIRST, "golden": False, "tensorboard": False, **options}
    cb = lightning.SignalchainCallback(out_dir=tmp_path / "sc", **options)
    if reported is not None:
        reported.cb = cb
    callbacks: list = [cb]
    if checkpoint_every:
        callbacks.append(L.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=checkpoint_every,
                                                     save_top_k=-1))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False, collate_fn=collate)
    val = (torch.utils.data.DataLoader(val_data, batch_size=1, collate_fn=collate) if val_data is not None
           else None)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=bool(checkpoint_every), logger=False,
                        callbacks=callbacks, default_root_dir=str(tmp_path), num_sanity_val_steps=0,
                        val_check_interval=val_every or None, limit_val_batches=None if val_every else 0)
    trainer.fit(Lit(), loader, val)
    return cb, trainer


@pytest.mark.parametrize("checkpoint_every", [0, 1])
def test_lightning_a_stalled_loader_is_a_loader_stall(tmp_path, checkpoint_every) -> None:
    # checkpoint_every=1: every fetch follows a save (the session marked "checkpoint" until the next batch)
    reported = Reported()
    cb, trainer = lit_fit(tmp_path, SlowAt(examples(6), k=3, reported=reported), reported=reported,
                          checkpoint_every=checkpoint_every, watchdog_timeout=T)
    assert trainer.global_step == 6
    f = stalls(cb)[0]
    assert (f.stage, f.evidence["phase"], f.evidence["site"]) == ("loader", "loader", HOLD)
    assert "waiting for the data loader" in f.message
    if checkpoint_every:
        assert (f.evidence["explicit_phase"], f.evidence["phase_source"]) == ("checkpoint", "stack")
    assert "perf.stall" in [g["id"] for g in written(tmp_path / "sc")]


def test_lightning_a_slow_checkpoint_save_is_saving_a_checkpoint(tmp_path, monkeypatch) -> None:
    reported, real = Reported(), torch.save

    def slow_save(*a, **kw):  # Lightning's checkpoint IO writes with torch.save
        hold(reported)
        return real(*a, **kw)

    monkeypatch.setattr(torch, "save", slow_save)
    cb, trainer = lit_fit(tmp_path, SlowAt(examples(6)), checkpoint_every=3, reported=reported, watchdog_timeout=T)
    assert trainer.global_step == 6 and any((tmp_path / "ckpt").glob("*step=3*.ckpt"))
    f = stalls(cb)[0]
    assert (f.stage, f.evidence["phase"], f.evidence["stack_phase"]) == ("runtime", "checkpoint", "checkpoint")
    assert f.evidence["site"] == HOLD and f.evidence["step"] == 2 and "saving a checkpoint" in f.message
    assert "perf.stall" in [g["id"] for g in written(tmp_path / "sc")]


def test_lightning_a_long_validation_of_quick_batches_is_progress_not_a_stall(tmp_path) -> None:
    timeout = 1.0
    vals = SlowAt(examples(2, seed=1), pause=timeout / 4)  # 8 batches of >= T/4: each validation >= 2 T
    cb, trainer = lit_fit(tmp_path, SlowAt(examples(4)), steps=4, val_data=vals, val_every=2,
                          watchdog_timeout=timeout)
    assert trainer.global_step == 4 and vals.fetched == 16 and cb.findings == []


def test_lightning_a_clean_run_with_a_short_timeout_raises_nothing(tmp_path) -> None:
    cb, trainer = lit_fit(tmp_path, SlowAt(examples(12)), steps=12, batch=4, watchdog_timeout=2.0,
                          golden=True, tensorboard=True)
    assert trainer.global_step == 12 and cb.findings == [] and written(tmp_path / "sc") == []
