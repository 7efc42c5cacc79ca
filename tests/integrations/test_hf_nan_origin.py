"""The NaN's origin on a T5-conditioned HF MusicGen trained by the real `Trainer` with the callback.

T5 makes a harmless `-inf` on every forward (log of a zero relative position, cast to an integer
bucket). The verdict must be the non-finite value that reaches the loss: the loss's own reduction
for a batch whose labels are all ignored, the batch key for `inf` already in the batch, the user's
line for a real `log(0)`. The T5 value is reported as benign context, never as the verdict.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402

from _rank_jobs import held_codes  # noqa: E402
from signalchain.integrations.hf_musicgen.labels import delayed_codes, labels_from_pattern  # noqa: E402
from signalchain.integrations.hf_trainer import SignalchainCallback  # noqa: E402
from signalchain.reference.hf.tiny import tiny_model, tiny_tokenizer  # noqa: E402

torch.set_num_threads(1)
STEPS, BAD, B, FRAMES, K, PAD = 6, 3, 2, 10, 4, 64
T = FRAMES + K - 1  # label positions once the delay pattern is laid


def codes(g: torch.Generator) -> torch.Tensor:
    return held_codes(g, K, FRAMES, PAD)


class Rows(torch.utils.data.IterableDataset):
    """Labels [T, K] in the decoder's own delay pattern (HF's layout); row 1 of step BAD carries the fault."""

    def __init__(self, fault: str, decoder: torch.nn.Module) -> None:
        self.fault, self.decoder = fault, decoder
        self.tok = tiny_tokenizer()

    def labels(self, g: torch.Generator) -> torch.Tensor:
        pattern = delayed_codes(self.decoder, codes(g), PAD)
        return labels_from_pattern(pattern, torch.tensor([FRAMES]), PAD)[0]

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        enc = self.tok("a calm piano melody", padding="max_length", max_length=8)
        for i in range(STEPS * B):
            bad = i == BAD * B + 1
            item = {"attention_mask": torch.tensor(enc["attention_mask"]),
                    "labels": self.labels(g)}
            if self.fault == "inf":  # cached text embeddings fed instead of ids
                emb = torch.randn(8, 32, generator=g)
                if bad:
                    emb[2] = float("inf")
                item["inputs_embeds"] = emb
            else:
                item["input_ids"] = torch.tensor(enc["input_ids"])
            if self.fault == "log":
                item["gain"] = torch.tensor(0.0 if bad else 1.0)
            if self.fault == "empty" and i // B == BAD:
                item["labels"] = torch.full((T, K), -100)
            yield item


class WithGainPenalty(torch.nn.Module):
    """A user's model: MusicGen plus a regulariser on each clip's gain, -log(gain) (log 0 = -inf)."""

    def __init__(self, musicgen: torch.nn.Module) -> None:
        super().__init__()
        self.musicgen = musicgen

    def forward(self, gain: torch.Tensor, **batch):
        out = self.musicgen(**batch)
        penalty = -torch.log(gain).mean()
        return {"loss": out.loss + 0.01 * penalty, "logits": out.logits}


def train(tmp_path, fault: str) -> list:
    model = tiny_model(0)
    decoder = model.decoder
    if fault == "log":
        model = WithGainPenalty(model)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=B,
        learning_rate=1e-4, logging_steps=1, save_strategy="no", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=0)
    cb = SignalchainCallback(out_dir=tmp_path / "sc", tensorboard=False, watchdog_timeout=None)
    transformers.Trainer(model=model, args=args, train_dataset=Rows(fault, decoder), callbacks=[cb]).train()
    return cb.findings


def by_id(findings: list) -> dict:
    return {f.id: f for f in findings}


def benign_t5(findings: list) -> bool:
    return any(f.id == "nonfinite.benign" and f.severity.value == "info" and f.evidence["op"] == "aten.log.default"
               and "SelfAttention" in f.evidence["module"] for f in findings)


def test_labels_all_ignored_are_named_at_the_losss_reduction(tmp_path) -> None:
    found = train(tmp_path, "empty")
    first = by_id(found)["nonfinite.first"]
    assert first.severity.value == "error" and first.evidence["step"] == BAD
    assert first.evidence["op"].startswith("aten.nll_loss") and first.evidence["cause"] == "empty_reduction"
    assert "ignore index -100" in first.message and "SelfAttention" not in first.message
    assert benign_t5(found)


def test_inf_in_the_batch_is_the_input_named_by_its_key(tmp_path) -> None:
    found = train(tmp_path, "inf")
    f = by_id(found)["nonfinite.input"]
    assert f.severity.value == "error" and f.evidence["batch_key"] == "batch['inputs_embeds']"
    assert f.evidence["examples"] == [1] and f.evidence["inf"] == 32 and f.evidence["step"] == BAD
    assert "nonfinite.first" not in by_id(found) and benign_t5(found)


def test_a_users_log_of_zero_is_named_at_the_users_line(tmp_path) -> None:
    found = train(tmp_path, "log")
    first = by_id(found)["nonfinite.first"]
    assert first.evidence["op"] == "aten.log.default" and first.evidence["cause"] == "log_domain"
    assert "test_hf_nan_origin.py" in first.evidence["location"] and first.evidence["step"] == BAD
    assert benign_t5(found)


def test_a_clean_t5_conditioned_run_is_silent(tmp_path) -> None:
    found = train(tmp_path, "clean")
    assert [f for f in found if f.severity.value in ("error", "warning")] == []
