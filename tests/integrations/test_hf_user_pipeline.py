"""The hand-written HF MusicGen user pipeline is itself sane (no doctor verdicts asserted here)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent


def _load():
    name = "_hf_user_pipeline_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "hf_user_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hf():
    return _load()


@pytest.fixture(scope="module")
def pipeline(hf):
    return hf.make_pipeline()


@pytest.fixture(scope="module")
def golden(pipeline):
    """One recorded step of a fresh model on the golden batch of seed 0."""
    model = pipeline.build_model(0)
    batch = pipeline.golden_batch(0)
    taps: dict[str, tuple[object, dict]] = {}

    def tap(stage, value, /, **meta):
        taps[stage] = (value, meta)
        return value

    out = pipeline.step(model, batch, tap)
    return model, batch, out, taps


def test_one_step_loss_is_finite_and_near_uniform(pipeline, golden):
    _, _, out, taps = golden
    card = pipeline.s["codebook_size"]
    loss = float(out.loss.detach())
    assert math.isfinite(loss)
    assert abs(loss - math.log(card)) < 0.3, (loss, math.log(card))
    assert "loss" in taps and "logits" in taps


def test_labels_hold_ignore_index_exactly_where_loss_mask_is_false(pipeline, golden):
    _, _, out, taps = golden
    labels, mask = taps["targets"][0], taps["mask.loss"][0]
    b, k = 4, pipeline.s["num_codebooks"]
    assert labels.shape[0] == b and labels.shape[2] == k  # HF layout [B, T', K]
    assert mask.shape == (b, k, labels.shape[1])  # [B, K, T']
    assert mask.dtype == torch.bool
    assert torch.equal(labels.transpose(1, 2) == -100, ~mask)
    valid = labels[labels != -100]
    assert valid.min() >= 0 and valid.max() < pipeline.s["codebook_size"]
    # the short last clip has fewer valid positions than the full ones; the delay pattern costs K-1 per row
    per_row = mask.sum(dim=(1, 2))
    frames = taps["tokens"][0].shape[-1]
    assert int(per_row[0]) == k * frames
    assert int(per_row[-1]) < int(per_row[0])
    assert out.mask is mask or torch.equal(out.mask, mask)


def test_padding_mask_is_in_frame_time_and_marks_the_short_clip(golden):
    _, _, _, taps = golden
    codes, padding = taps["tokens"][0], taps["mask.padding"][0]
    assert padding.shape == (codes.shape[0], codes.shape[-1])
    assert padding[:-1].all() and not padding[-1].all()


def test_codes_are_not_all_one_value(pipeline, golden):
    _, _, _, taps = golden
    codes, meta = taps["tokens"]
    assert codes.shape[:2] == (4, pipeline.s["num_codebooks"])
    assert meta["cardinality"] == pipeline.s["codebook_size"]
    for q in range(codes.shape[1]):
        assert codes[:, q].unique().numel() > 4, f"codebook {q} collapsed: the codebook fill did not work"


def test_build_model_is_deterministic(pipeline):
    a, b = pipeline.build_model(3), pipeline.build_model(3)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb), na
    assert not any(p.requires_grad for p in a.audio_encoder.parameters())


def test_generate_returns_audio_of_the_expected_shape(pipeline, golden):
    model, batch, _, _ = golden
    frames = 8
    audio = pipeline.generate(model, batch, {"max_frames": frames, "seed": 0, "cfg_coef": 3.0})
    hop = pipeline.hop
    assert audio.shape == (4, 1, frames * hop)
    assert torch.isfinite(audio).all()
    greedy = pipeline.generate(model, batch, {"max_frames": frames, "greedy": True, "cfg_coef": 1.0})
    assert greedy.shape == (4, 1, frames * hop)


def test_decode_and_train_step(pipeline, golden):
    model, batch, _, taps = golden
    codes = taps["tokens"][0]
    audio = pipeline.decode(codes, model)
    assert audio.shape == (codes.shape[0], 1, codes.shape[-1] * pipeline.hop)
    with pytest.raises(ValueError):
        pipeline.decode(audio, model)  # audio is not codes
    fresh = pipeline.build_model(0)
    optimizer = pipeline.build_optimizer(fresh)
    seen = {}
    out = pipeline.train_step(fresh, optimizer, batch, lambda s, v, /, **m: seen.setdefault(s, v))
    assert math.isfinite(out.extras["grad_norm"]) and "grad.norm" in seen
    with torch.no_grad():
        after = pipeline.step(fresh, batch).loss
    assert float(after) < float(out.loss.detach())


def test_data_capabilities(pipeline):
    splits = pipeline.splits()
    assert set(splits) == {"train", "validation"}
    row = splits["train"][0]
    assert {"id", "audio", "caption"} <= set(row)
    assert {"array", "sampling_rate"} <= set(row["audio"])
    ids = [r["id"] for s in splits.values() for r in s]
    assert len(ids) == len(set(ids))
    batch = next(iter(pipeline.loader("train")))
    assert len(batch["caption"]) == pipeline.s["batch_size"]
    swapped = pipeline.with_captions(batch, ["x"] * len(batch["caption"]))
    assert swapped["caption"] == ["x"] * 4 and batch["caption"] != swapped["caption"]
    ids = pipeline.tokenize(batch["caption"])["input_ids"]
    assert (ids == pipeline.tokenizer.unk_token_id).sum() == 0  # every caption word is in the vocabulary
    assert ids.shape[1] < pipeline.s["text_max_length"]  # never truncated
