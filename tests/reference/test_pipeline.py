"""The reference pipeline as signalchain sees it: taps at every stage, deterministic, comparable."""

import numpy as np
import pytest
import torch

from signalchain import compare_traces
from signalchain.experiments import run_golden
from signalchain.pipeline import REQUIRED, capabilities
from signalchain.reference import ReferencePipeline
from signalchain.trace import STAGES

DESIGN_STAGES = ["audio.original", "caption", "metadata", "audio.resampled", "audio.mono", "crop",
                 "audio.cropped", "tokens", "tokens.pattern", "mask.padding", "condition.tokens",
                 "condition.mask", "condition.dropped", "condition.embedding", "targets", "logits",
                 "mask.loss", "loss", "loss.per_codebook", "audio.decoded"]


@pytest.fixture(scope="module")
def pipe():
    return ReferencePipeline()


@pytest.fixture(scope="module")
def golden(pipe):
    return run_golden(pipe, seed=0)


def test_it_is_a_pipeline_with_every_capability(pipe):
    assert all(hasattr(pipe, m) for m in REQUIRED)
    caps = capabilities(pipe)
    for cap in ("with_captions", "condition_parameters", "generate", "decode", "training_examples",
                "splits", "loader", "train_step", "config", "with_faults", "sample_rate"):
        assert cap in caps


def test_every_design_stage_is_tapped_in_pipeline_order(golden):
    names = golden.trace.names()
    assert set(DESIGN_STAGES) <= set(names)
    vocab = [s.name for s in STAGES]
    ranks = [vocab.index(n) for n in names if n in vocab and n not in ("condition.dropped",)]
    assert ranks == sorted(ranks)


def test_stage_shapes_agree(pipe, golden):
    t = golden.trace
    b, k = pipe.cfg.batch_size, pipe.codec.n_codebooks
    frames = int(pipe.cfg.segment_seconds * pipe.codec.frame_rate)
    assert t["audio.original"].shape[:2] == [b, 2]
    assert t["audio.cropped"].shape == [b, 1, int(pipe.cfg.segment_seconds * pipe.sample_rate)]
    assert t["tokens"].shape == [b, k, frames]
    assert t["tokens.pattern"].shape == [b, k, frames + k - 1]
    assert t["logits"].shape == [b, k, frames, pipe.codec.cardinality]
    assert t["mask.loss"].shape == t["targets"].shape == [b, k, frames]
    assert t["condition.embedding"].shape == [b, pipe.cfg.text_max_len, pipe.cfg.dim]
    assert t["audio.original"].sample_rate == 32000 and t["audio.cropped"].sample_rate == 16000


def test_initial_loss_is_near_log_cardinality(pipe, golden):
    assert golden.trace.value("loss") == pytest.approx(np.log(pipe.codec.cardinality), abs=0.3)


def test_padding_is_real_and_masked(golden):
    t = golden.trace
    lengths = np.array(t["audio.cropped"].meta["lengths"])
    assert (lengths < t["audio.cropped"].shape[-1]).any(), "the golden batch should hold a clip shorter than the crop"
    pad = t.value("mask.padding")
    assert pad.all(axis=1).any() and (~pad).any()


def test_same_seed_same_trace_different_seed_different_batch(pipe, golden):
    again = run_golden(pipe, seed=0)
    assert compare_traces(golden.trace, again.trace).identical
    other = run_golden(pipe, seed=1)
    assert compare_traces(golden.trace, other.trace).first_divergence.stage == "audio.original"


class MonoLeftOnly(ReferencePipeline):
    def to_mono(self, audio):  # a data-stage change: keep the left channel instead of averaging
        return audio[:, :1].copy()


class TokensOffByOne(ReferencePipeline):
    def encode_tokens(self, cropped):
        tokens = super().encode_tokens(cropped)
        return torch.roll(tokens, shifts=1, dims=-1)


class MaskDropsLastFrame(ReferencePipeline):
    def loss_mask(self, padding, pattern_mask):
        mask = super().loss_mask(padding, pattern_mask).clone()
        mask[..., -1] = False
        return mask


class LossSmoothed(ReferencePipeline):
    def compute_loss(self, logits, targets, mask):
        loss, per = super().compute_loss(logits, targets, mask)
        return loss * 0.9 + 0.1 * float(np.log(logits.shape[-1])), per


@pytest.mark.parametrize("cls,stage", [(MonoLeftOnly, "audio.mono"), (TokensOffByOne, "tokens"),
                                       (MaskDropsLastFrame, "mask.loss"), (LossSmoothed, "loss")])
def test_compare_names_exactly_the_changed_stage(golden, cls, stage):
    changed = run_golden(cls(), seed=0)
    comparison = compare_traces(golden.trace, changed.trace)
    assert comparison.first_divergence.stage == stage
    before = golden.trace.names()[: golden.trace.names().index(stage)]
    assert all(d.equal for d in comparison.stages if d.stage in before)


def test_train_step_updates_the_model(pipe):
    model = pipe.build_model(0)
    opt = pipe.build_optimizer(model)
    batch = pipe.golden_batch(0)
    before = [p.detach().clone() for p in model.parameters()]
    out = pipe.train_step(model, opt, batch)
    assert np.isfinite(out.extras["grad_norm"]) and out.extras["grad_norm"] > 0
    changed = sum(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert changed == len(before)


def test_loader_batches_differ_and_come_from_the_split(pipe):
    it = pipe.loader("train")
    a, b = next(it), next(it)
    assert len(a) == pipe.cfg.batch_size and a.captions != b.captions
    valid_ids = {c.source_id for c in pipe.splits()["valid"]}
    assert not {m["source_id"] for m in a.metadata} & valid_ids


def test_with_captions_replaces_only_captions(pipe):
    batch = pipe.golden_batch(0)
    new = pipe.with_captions(batch, ["x"] * len(batch))
    assert new.captions == ["x"] * len(batch) and new.clips is batch.clips and batch.captions[0] != "x"
    with pytest.raises(ValueError, match="1 captions for a batch of 8"):
        pipe.with_captions(batch, ["x"])


def test_generate_and_decode(pipe):
    model = pipe.build_model(0)
    batch = pipe.make_batch([0, 1], seed=0)
    res = pipe.generate(model, batch, {"max_frames": 20, "cfg_coef": 1.0})
    assert res.codes.shape == (2, pipe.codec.n_codebooks, 20)
    audio = pipe.decode(res.codes)
    assert audio.shape == (2, 1, 20 * pipe.codec.hop) and torch.isfinite(audio).all()


def test_config_is_json_and_names_faults(pipe):
    import json

    json.dumps(pipe.config)
    faulty = pipe.with_faults(["crop_in_padding"])
    assert faulty.config["faults"] == ["crop_in_padding"] and pipe.config["faults"] == []
    with pytest.raises(ValueError, match="unknown fault 'crop_in_paddin'; did you mean crop_in_padding"):
        pipe.with_faults(["crop_in_paddin"])
