"""The first step of a live run judged as `doctor` judges a golden trace (issue 25, item 2), through the
real HF `Trainer` and Lightning on a tiny HF MusicGen: labels without the delay pattern, decoder
inputs equal to the labels, and a decoder frozen but for a sliver are found; a clean run (labels in
the model's own pattern, decoder inputs the model shifts itself, a frozen codec and text encoder,
LoRA through peft) raises no error and no warning. The golden holds the codec's reconstruction of
the labels, which `inspect` lists as audio."""

from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from signalchain.cli import cli  # noqa: E402
from signalchain.integrations.hf_musicgen.labels import delayed_codes, labels_from_pattern  # noqa: E402
from signalchain.integrations.hf_trainer import SignalchainCallback  # noqa: E402
from signalchain.reference.data import generate_clip  # noqa: E402
from signalchain.reference.hf.tiny import TinyConfig, resample_clip, tiny_model, tiny_tokenizer  # noqa: E402

torch.set_num_threads(1)
CFG = TinyConfig()
STEPS, BATCH, FRAMES = 3, 4, 40


@torch.no_grad()
def rows(model, n: int, seed: int, *, delay: bool = True, unshifted: bool = False,
         shifted: bool = False) -> list[dict]:
    """A user's preprocessed dataset: caption ids, and labels [T', K] from the codec's codes of real
    clips (in the decoder's own delay pattern, or, with delay=False, flat in frame time)."""
    tok, pad = tiny_tokenizer(CFG.max_text_len), CFG.codebook_size
    clips = [generate_clip(i, seed, 32000, seconds=1.0) for i in range(n)]
    audio = torch.from_numpy(np.stack([resample_clip(c.audio, 32000, CFG.sample_rate).mean(0, keepdims=True)[:, :16000]
                                       for c in clips]))
    codes = model.audio_encoder.encode(audio).audio_codes[0][..., :FRAMES]  # [B, K, T]
    valid = torch.full((n,), codes.shape[-1])
    if delay:
        pattern = delayed_codes(model.decoder, codes, pad)
        labels = labels_from_pattern(pattern, valid, pad)  # [B, T', K]
    else:
        pattern, labels = codes, codes.transpose(1, 2).contiguous()
    enc = tok([c.caption for c in clips], padding="max_length", max_length=CFG.max_text_len, truncation=True,
              return_tensors="pt")
    out = []
    for i in range(n):
        row = {"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i], "labels": labels[i]}
        if unshifted:  # decoder inputs built from the labels but never shifted behind the start token
            row["decoder_input_ids"] = pattern[i]  # [K, T'], the pad id where the labels hold -100
        if shifted:  # the user's own decoder inputs, made as HF makes them
            from transformers.models.musicgen.modeling_musicgen import shift_tokens_right

            row["decoder_input_ids"] = shift_tokens_right(labels[i : i + 1], pad, pad)[0]  # [K, T']
        out.append(row)
    return out


def collate(items: list[dict]) -> dict:
    batch = {k: torch.stack([x[k] for x in items]) for k in items[0]}
    if "decoder_input_ids" in batch:
        batch["decoder_input_ids"] = batch["decoder_input_ids"].reshape(-1, batch["decoder_input_ids"].shape[-1])
    return batch


def hf_train(tmp_path, model, data, **options):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=1e-3, save_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0,
        remove_unused_columns=False)
    cb = SignalchainCallback(tensorboard=False, watchdog_timeout=None, **options)
    transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate, callbacks=[cb]).train()
    return cb


def loud(cb) -> list:
    return [f for f in cb.findings if f.severity.value != "info"]


def freeze_by_design(model):
    model.freeze_audio_encoder()
    model.freeze_text_encoder()
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_a_clean_hf_musicgen_step_is_silent(tmp_path, seed) -> None:
    model = freeze_by_design(tiny_model(seed))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, seed), golden=False)
    assert loud(cb) == [], [f.message for f in loud(cb)]
    frozen = [f for f in cb.findings if f.id == "optim.param_frozen"]
    assert frozen and frozen[0].severity.value == "info"
    assert set(frozen[0].evidence["modules"]) == {"audio_encoder", "text_encoder"}


def test_user_made_decoder_inputs_shifted_as_hf_does_are_silent(tmp_path) -> None:
    model = freeze_by_design(tiny_model(0))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0, shifted=True), golden=False)
    assert loud(cb) == [], [f.message for f in loud(cb)]


def test_labels_without_the_delay_pattern_are_misaligned(tmp_path) -> None:
    model = freeze_by_design(tiny_model(0))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0, delay=False), golden=False)
    found = [f for f in cb.findings if f.id == "targets.misaligned"]
    assert found and found[0].severity.value == "error" and found[0].stage == "targets"
    assert found[0].evidence["pattern_delays"] == [0, 0, 0, 0]
    assert found[0].evidence["model_delays"] == [0, 1, 2, 3]
    assert found[0].evidence["step"] == 0


def test_decoder_inputs_equal_to_the_labels_are_found(tmp_path) -> None:
    model = freeze_by_design(tiny_model(0))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0, unshifted=True), golden=False)
    found = [f for f in cb.findings if f.id == "targets.misaligned"]
    assert found and found[0].severity.value == "error"
    assert found[0].evidence["input_lag"] == 0 and found[0].evidence["same_position"] > 0.9


def freeze_decoder_but_heads(model):
    freeze_by_design(model)
    for name, p in model.decoder.named_parameters():
        p.requires_grad_(name.startswith("lm_heads.0"))
    return model


def test_a_decoder_frozen_but_a_sliver_is_a_warning_through_hf(tmp_path) -> None:
    model = freeze_decoder_but_heads(tiny_model(0))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0), golden=False)
    found = [f for f in cb.findings if f.id == "optim.param_frozen" and f.severity.value == "warning"]
    assert len(found) == 1 and found[0].evidence["module"] == "decoder"
    assert found[0].evidence["trainable_share"] < 0.05
    assert not [f for f in cb.findings if f.severity.value == "error"]


def test_lora_through_peft_is_info_at_most(tmp_path) -> None:
    peft = pytest.importorskip("peft")
    model = freeze_by_design(tiny_model(0))
    data = rows(model, STEPS * BATCH, 0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = peft.get_peft_model(model, config)
    cb = hf_train(tmp_path, model, data, golden=False)
    assert loud(cb) == [], [f.message for f in loud(cb)]
    roles = {f.evidence.get("role") for f in cb.findings if f.id == "optim.param_frozen"}
    assert "adapters" in roles


def test_the_golden_holds_the_codec_reconstruction_of_the_labels(tmp_path) -> None:
    model = freeze_by_design(tiny_model(0))
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0))
    golden = tmp_path / "signalchain" / "golden"
    assert (golden / "audio" / "audio.decoded.wav").exists()
    res = CliRunner().invoke(cli, ["inspect", str(golden), "--json", str(tmp_path / "i.json"),
                                   "--html", str(tmp_path / "i.html")])
    assert res.exit_code == 0, res.output
    stages = {s["name"]: s for s in json.loads((tmp_path / "i.json").read_text())["stages"]}
    assert stages["audio.decoded"]["kind"] == "audio"
    assert stages["audio.decoded"]["meta"]["source"].startswith("the codec's reconstruction of the labels")
    html = (tmp_path / "i.html").read_text()
    assert "<audio" in html and "reconstruction of the labels" in html
    assert not loud(cb)


def test_the_frozen_decoder_through_lightning(tmp_path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from signalchain.integrations.lightning import SignalchainCallback as LightningCallback

    class Module(L.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-3)

    model = freeze_decoder_but_heads(tiny_model(0))
    loader = torch.utils.data.DataLoader(rows(model, STEPS * BATCH, 0), batch_size=BATCH, collate_fn=collate)
    cb = LightningCallback(tensorboard=False, watchdog_timeout=None, golden=False, out_dir=tmp_path / "sc")
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
                        default_root_dir=str(tmp_path))
    trainer.fit(Module(model), loader)
    found = [f for f in cb.findings if f.id == "optim.param_frozen" and f.severity.value == "warning"]
    assert len(found) == 1 and found[0].evidence["module"] == "decoder"
    assert found[0].evidence["root"] == "model"
    assert not [f for f in cb.findings if f.severity.value == "error"]


def test_a_decoder_frozen_whole_is_not_a_design(tmp_path) -> None:
    model = tiny_model(0)
    model.freeze_audio_encoder()
    model.decoder.requires_grad_(False)  # meant: model.freeze_text_encoder()
    cb = hf_train(tmp_path, model, rows(model, STEPS * BATCH, 0), golden=False)
    found = [f for f in cb.findings if f.evidence.get("role") == "lm_frozen"]
    assert len(found) == 1 and found[0].severity.value == "warning" and found[0].evidence["module"] == "decoder"


def test_membership_counts_every_optimizer_and_skips_one_holding_copies() -> None:
    from signalchain.integrations._first_step_judges import parameter_records

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    first, second = (torch.optim.SGD(model[i].parameters(), lr=0.1) for i in (0, 1))
    assert all(q.in_optimizer for q in parameter_records(model, [first, second]))
    assert [q.in_optimizer for q in parameter_records(model, [first])] == [True, True, False, False]
    copies = torch.optim.SGD([torch.nn.Parameter(torch.zeros(12))], lr=0.1)  # a flattened partition
    assert all(q.in_optimizer for q in parameter_records(model, [copies]))


@pytest.mark.parametrize("mono_delays", [False, True])
def test_a_stereo_checkpoint_is_judged_by_its_own_shared_delays(tmp_path, mono_delays) -> None:
    """Stereo codebook pairs share a delay ([0, 0, 1, 1, …]): labels in that pattern are silent,
    labels delayed one step per codebook (the mono pattern) are not what the model generates."""
    model = freeze_by_design(tiny_model(0, TinyConfig(audio_channels=2)))
    g = torch.Generator().manual_seed(0)
    data = []
    for row in rows(tiny_model(0), STEPS * BATCH, 0):
        codes = torch.randint(0, CFG.codebook_size, (1, 8, FRAMES), generator=g)
        if mono_delays:
            labels = torch.full((FRAMES + 7, 8), -100)
            for k in range(8):
                labels[k : k + FRAMES, k] = codes[0, k]
        else:
            pattern = delayed_codes(model.decoder, codes, CFG.codebook_size)
            labels = labels_from_pattern(pattern, torch.tensor([FRAMES]), CFG.codebook_size, audio_channels=2)[0]
        data.append({**row, "labels": labels})
    cb = hf_train(tmp_path, model, data, golden=False)
    if not mono_delays:
        assert loud(cb) == [], [f.message for f in loud(cb)]
        return
    found = [f for f in cb.findings if f.id == "targets.misaligned"]
    assert found and found[0].evidence["model_delays"] == [0, 0, 1, 1, 2, 2, 3, 3]
