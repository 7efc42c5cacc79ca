"""Instability judged live in real trainers (issue 25, items 3 and 6): lr 10 through HF `Trainer` and
Lightning names the oversized update at step 0 and the divergence as an error at its step; a rate that
jumps mid-run is a warning at the jump; clean runs at a normal rate stay silent over several seeds.
Properties only: the exact trajectory of a diverging run is chaotic."""

from __future__ import annotations

import json
import logging

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402

from _live_models import Codes, Tiny, code_examples, collate, examples  # noqa: E402
from signalchain.integrations.hf_trainer import SignalchainCallback as HFCallback  # noqa: E402
from signalchain.integrations.lightning import SignalchainCallback as LitCallback  # noqa: E402

torch.set_num_threads(1)
OPTIONS = {"tensorboard": False, "golden": False, "watchdog_timeout": None}


class Ordered(torch.utils.data.IterableDataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __iter__(self):
        return iter(self.items)


def hf(tmp_path, *, lr: float, steps: int, seed: int = 0, codes: bool = False, jump_at: int | None = None):
    model = Codes(seed) if codes else Tiny(seed)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=steps, per_device_train_batch_size=4,
        learning_rate=lr, lr_scheduler_type="constant", logging_steps=1, save_strategy="no", disable_tqdm=True,
        seed=seed, dataloader_num_workers=0)
    optimizers = (None, None)
    if jump_at is not None:  # a schedule that multiplies the rate by 200 at step `jump_at`
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        optimizers = (opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 if s < jump_at else 200.0))
    cb = HFCallback(**OPTIONS)
    data = Ordered(code_examples(steps * 4, seed) if codes else examples(steps, None, seed))
    transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate, callbacks=[cb],
                         optimizers=optimizers).train()
    return cb


class Lit(L.LightningModule):
    def __init__(self, lr: float, optimizer: str, seed: int = 0) -> None:
        super().__init__()
        self.net, self.lr, self.optimizer_name = Tiny(seed), lr, optimizer

    def training_step(self, batch, batch_idx):
        return self.net(**batch)["loss"]

    def configure_optimizers(self):
        cls = torch.optim.SGD if self.optimizer_name == "sgd" else torch.optim.AdamW
        return cls(self.parameters(), lr=self.lr)


def lit(tmp_path, *, lr: float, steps: int, optimizer: str = "sgd", seed: int = 0):
    loader = torch.utils.data.DataLoader(examples(steps, None, seed), batch_size=4, shuffle=False,
                                         collate_fn=collate)
    cb = LitCallback(out_dir=tmp_path / "sc", **OPTIONS)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, logger=False, callbacks=[cb],
                        default_root_dir=str(tmp_path))
    trainer.fit(Lit(lr, optimizer, seed), loader)
    return cb


def judged(cb):
    return [f for f in cb.findings if f.severity.value != "info"]


def assert_diverges(cb, steps: int, error_ids: tuple[str, ...] = ("loss.spike",)) -> None:
    """An oversized first update (a warning at step 0), then the divergence as one error at its step."""
    found = judged(cb)
    first = found[0]
    assert (first.id, first.severity.value, first.evidence["step"]) == ("optim.lr_too_large", "warning", 0)
    assert first.evidence["update_ratio"] >= 1 and first.evidence["lr"] == 10
    assert "step 0:" in first.message and "learning rate 10" in first.message
    errors = [f for f in found if f.severity.value == "error"]
    assert sorted(f.id for f in errors) == sorted(error_ids), [f.message for f in found]
    err = next(f for f in errors if f.id == "loss.spike").evidence
    assert 0 < err["step"] < steps and err["loss"] >= 10 * err["start"]
    assert err["start"] == pytest.approx(cb.session.monitor.history["loss"][0])
    assert cb.session.monitor.history["loss"][err["step"]] == err["loss"]  # the trainer's step indexes the history
    assert all(f.check == "checks.instability_live" for f in found)


@pytest.mark.parametrize("codes", [False, True], ids=["tiny", "codes"])
def test_hf_trainer_at_lr_10_warns_at_step_0_and_errors_when_it_diverges(tmp_path, codes, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="signalchain"):
        cb = hf(tmp_path, lr=10.0, steps=20, codes=codes)
    assert_diverges(cb, 20)
    saved = json.loads((tmp_path / "signalchain" / "findings.json").read_text())["findings"]
    assert {f["id"] for f in saved} >= {"optim.lr_too_large", "loss.spike"}
    assert any("loss.spike @ optimizer: step" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_lightning_at_lr_10_warns_at_step_0_and_errors_when_it_diverges(tmp_path, optimizer) -> None:
    cb = lit(tmp_path, lr=10.0, steps=30, optimizer=optimizer)
    assert_diverges(cb, 30)


def test_a_rate_that_jumps_mid_run_is_a_warning_at_the_jump(tmp_path) -> None:
    jump = 30
    cb = hf(tmp_path, lr=0.01, steps=45, jump_at=jump)
    found = judged(cb)
    assert found, "the jump to 200x the rate went unnoticed"
    first = found[0]
    assert first.severity.value == "warning" and first.id in {"loss.spike", "optim.lr_too_large"}
    assert jump <= first.evidence["step"] <= jump + 3  # at the jump, not before it


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_runs_at_a_normal_rate_stay_silent(tmp_path, seed) -> None:
    assert judged(hf(tmp_path / "hf", lr=0.01, steps=60, seed=seed)) == []
    assert judged(hf(tmp_path / "codes", lr=0.01, steps=60, seed=seed, codes=True)) == []
    assert judged(lit(tmp_path / "lit", lr=0.05, steps=60, seed=seed)) == []


class Captions(torch.utils.data.Dataset):
    """Captions and codec-token labels [T + K - 1, K] (delay pattern) for an HF MusicGen: each caption has
    its own learnable codes."""

    CAPTIONS = ["a slow calm piano melody", "fast loud drums with bass", "a bright guitar solo", "soft strings"]

    def __init__(self, tok, n: int, codebooks: int, cardinality: int, frames: int = 25) -> None:
        self.tok, self.n, self.k, self.v, self.t = tok, n, codebooks, cardinality, frames

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        enc = self.tok(self.CAPTIONS[i % 4], padding="max_length", max_length=16)
        base = torch.randint(0, self.v, (1, self.k), generator=torch.Generator().manual_seed(i % 4))
        codes = (base + torch.arange(self.t)[:, None] * (1 + i % 4)) % self.v  # [T, K]
        # MusicGen's delay pattern: codebook k is delayed by k frames; the positions it leaves are ignored
        labels = torch.full((self.t + self.k - 1, self.k), -100)
        for k in range(self.k):
            labels[k:k + self.t, k] = codes[:, k]
        return {"input_ids": torch.tensor(enc["input_ids"]), "attention_mask": torch.tensor(enc["attention_mask"]),
                "labels": labels}


@pytest.mark.slow
@pytest.mark.parametrize("lr", [10.0, 1e-3])
def test_a_tiny_hf_musicgen_at_lr_10_diverges_and_at_1e_3_is_silent(tmp_path, lr) -> None:
    from signalchain.reference.hf.tiny import TinyConfig, tiny_model, tiny_tokenizer

    tok, cfg, steps = tiny_tokenizer(), TinyConfig(), 30
    model = tiny_model(0, cfg, len(tok))
    for p in model.audio_encoder.parameters():  # the codec is frozen, as in MusicGen fine-tuning
        p.requires_grad_(False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=steps, per_device_train_batch_size=4,
        learning_rate=lr, lr_scheduler_type="constant", save_strategy="no", disable_tqdm=True, seed=0,
        dataloader_num_workers=0, remove_unused_columns=False, logging_steps=1)  # HF logs its pre-clip norm
    cb = HFCallback(**OPTIONS)
    data = Captions(tok, steps * 4, cfg.num_codebooks, cfg.codebook_size)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    if lr == 1e-3:
        assert judged(cb) == []
        return
    # the loss diverges, and HF's pre-clip gradient norm (its clipped one is all the Monitor sees) explodes
    assert_diverges(cb, steps, ("loss.spike", "grad.exploding"))
    grad = next(f for f in cb.findings if f.id == "grad.exploding").evidence
    assert grad["grad_norm"] >= 100 * grad["start"] and grad["step"] < steps
