"""Every zoo member builds, its step and its update run, and its taps are what it claims.

The pretrained starts are replaced by 2-update ones in a temporary cache (the real ones take a
minute per bed); what is tested is that a member fine-tunes from the cached weights."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("miditok")

from signalchain import record, tap  # noqa: E402
from signalchain.reference import zoo  # noqa: E402
from signalchain.reference.zoo import hf as zoo_hf  # noqa: E402
from signalchain.reference.zoo import reference as zoo_ref  # noqa: E402
from signalchain.reference.zoo import symbolic as zoo_sym  # noqa: E402

NAMES = list(zoo.MEMBERS)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One temporary cache for the module: the 2-update pretrained starts are built once per bed and
    the symbolic bed's pieces parsed once (music21, ~15 s), not once per member (it was 4 min)."""
    return tmp_path_factory.mktemp("zoo-cache")


@pytest.fixture(autouse=True)
def short_pretraining(module_cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(module_cache))
    monkeypatch.setattr(zoo_ref, "REF_PRETRAIN", replace(zoo_ref.REF_PRETRAIN, steps=2))
    monkeypatch.setattr(zoo_hf, "HF_PRETRAIN", replace(zoo_hf.HF_PRETRAIN, steps=2))
    monkeypatch.setattr(zoo_sym, "SYM_PRETRAIN", replace(zoo_sym.SYM_PRETRAIN, steps=2))


def test_registry_has_at_least_40_members_on_every_bed():
    beds = {m.bed for m in zoo.MEMBERS.values()}
    assert len(zoo.MEMBERS) >= 40 and beds == {"reference", "hf", "symbolic"}
    assert set(zoo.FAST) <= set(zoo.MEMBERS) and {zoo.MEMBERS[n].bed for n in zoo.FAST} == beds
    for m in zoo.MEMBERS.values():
        assert m.why and m.spec.endswith(":" + m.name)
    assert {m.pretrained for m in zoo.MEMBERS.values()} >= {"reference", "hf", "symbolic"}


def _trace(pipe, model, batch):
    with record(values=True) as trace:
        out = pipe.step(model, batch, tap)
    return trace, out


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_member_builds_steps_and_updates(name):
    m = zoo.MEMBERS[name]
    pipe = zoo.build(name)
    assert pipe.name == name
    model = pipe.build_model(0)
    opt = pipe.build_optimizer(model)
    batch = pipe.golden_batch(0)
    trace, out = _trace(pipe, model, batch)
    assert torch.isfinite(out.loss) and out.loss.requires_grad
    steps = []
    opt.register_step_post_hook(lambda *a: steps.append(1))
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    pipe.train_step(model, opt, batch, lambda s, v, **k: v)
    assert len(steps) == 1  # one optimizer step per update, whatever the accumulation
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    moved = sum(not torch.equal(a, b) for a, b in zip(before, after))
    assert moved > 0
    _check_claims(m, pipe, model, batch, trace)


def _check_claims(m, pipe, model, batch, trace):
    tags = m.tags
    names = trace.names()
    if "batch" in tags:
        assert len(batch) == tags["batch"]
    taps = tags.get("taps")
    if taps in ("input-as-pattern", "pattern+input"):
        inputs = torch.as_tensor(trace.value("tokens.input" if taps == "pattern+input" else "tokens.pattern"))
        special = trace["tokens.pattern"].meta["special"]
        assert (inputs[:, :, 0] == special).all()  # the start column the model reads first
        if taps == "pattern+input":
            pattern = torch.as_tensor(trace.value("tokens.pattern"))
            # inputs = the pattern shifted right (HF's shifted labels hold the pad id where the label was -100)
            kept = inputs[:, :, 1:] != special
            assert kept.float().mean() > 0.5
            assert torch.equal(inputs[:, :, 1:][kept], pattern[:, :, :-1][kept])
        else:
            assert "tokens.input" not in names
    elif taps in ("reference", "hf", "frame-time"):
        assert "tokens.input" not in names
    if taps == "labels-btk":
        targets = np.asarray(trace.value("targets"))
        tokens = np.asarray(trace.value("tokens"))
        assert targets.shape[0] == tokens.shape[0] and targets.shape[2] == tokens.shape[1]  # [B, T', K]
        assert (targets == -100).any() and "mask.loss" not in names
        assert np.asarray(trace.value("logits")).ndim == 3  # [B*K, T', V]
    if taps == "frame-time":
        assert np.array_equal(np.asarray(trace.value("targets")), np.asarray(trace.value("tokens")))
        assert np.asarray(trace.value("mask.loss")).shape == np.asarray(trace.value("tokens")).shape
    if tags.get("channels") == 2:
        assert np.asarray(trace.value("tokens")).shape[1] == 8  # 4 codebooks per channel, interleaved
    if tags.get("tokenizer") == "tsd":
        vocab = trace["tokens"].meta["vocab"]
        assert any(v.startswith("TimeShift") for v in vocab) and not any(v.startswith("Bar") for v in vocab)
    if tags.get("amp") == "bf16":
        assert str(trace["logits"].dtype).endswith("bfloat16")
        assert pipe.amp_dtype == torch.bfloat16
    if "cond_dropout" in tags:
        assert trace["condition.dropped"].meta["rate"] == tags["cond_dropout"]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if tags.get("lora"):
        assert trainable and all("lora_" in n for n in trainable)
    if tags.get("freeze_text"):
        text = model.text_encoder.parameters()
        assert not any(p.requires_grad for p in text)
    if m.pretrained:
        state, _ = zoo.pretrained_state(zoo.pretrain_spec(m.pretrained))
        own = {k.replace(".base_layer", ""): v for k, v in pipe.build_model(1).state_dict().items()}  # any seed
        same = [k for k in state if k in own and torch.equal(own[k], state[k])]
        assert len(same) == len(state)  # every pretrained weight loaded (LoRA adds its own)
