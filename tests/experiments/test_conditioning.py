"""The conditioning family on the reference pipeline, with bugs written here (not the catalogue's):
each detector is proven on an implementation it was not tuned to, and the clean pipeline stays silent
over seeds (the golden batch, the model and the loader order all change with the seed)."""

import pytest
import torch

from signalchain.experiments.conditioning import measure_condition_data
from signalchain.experiments.conditioning_sensitivity import measure_sensitivity
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import FAMILIES, run_family, select_families
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline
from signalchain.reference.text import WordTokenizer


class Seeded(ReferencePipeline):
    """The reference, with the loader order drawn from `loader_seed` (the protocol's loader takes a split only)."""

    loader_seed = 0

    def loader(self, split="train", seed=None):
        return super().loader(split, self.loader_seed if seed is None else seed)


def run(pipeline, seed=0):
    ctx = Context(ProtocolView(pipeline), seed=seed, budget=BUDGETS["economy"])
    select_families(["conditioning"])  # registers the families
    return run_family(FAMILIES["conditioning"], ctx), ctx


def real(findings):
    return sorted({(f.id, f.stage) for f in findings if f.severity.value != "info"})


@pytest.mark.parametrize("seed", range(5))
def test_clean_reference_is_silent(seed):
    p = Seeded()
    p.loader_seed = seed
    findings, ctx = run(p, seed)
    assert real(findings) == []
    assert not [f for f in findings if f.id == "internal.check_failed"]
    assert "conditioning.golden" in ctx.metrics and "conditioning.relationship" in ctx.metrics


# ---- bugs written here: captions, metadata, pairing -------------------------------------------------

class _Relabel(ReferencePipeline):
    """Rewrites captions/metadata wherever batches are made (the loader and the golden batch)."""

    def relabel(self, batch):
        return batch

    def make_batch(self, indices, seed, data_seed=0):
        return self.relabel(super().make_batch(indices, seed, data_seed))

    def golden_batch(self, seed):
        return self.relabel(super().golden_batch(seed))


class LengthFilter(_Relabel):
    def relabel(self, batch):  # a "keep captions short" filter that blanks the long ones instead of cutting them
        batch.captions = ["" if len(c) > 40 else c for c in batch.captions]
        return batch


class MoodOnly(_Relabel):
    def relabel(self, batch):  # the sidecar reader keeps two fields and the caption falls back to the mood
        batch.metadata = [{"source_id": m["source_id"], "moods": m["moods"]} for m in batch.metadata]
        batch.captions = [m["moods"][0] for m in batch.metadata]
        return batch


class Reversed(_Relabel):
    def relabel(self, batch):  # captions reversed to "newest first", clips and metadata left alone
        batch.captions = batch.captions[::-1]
        return batch


class OtherCollection(ReferencePipeline):
    def make_batch(self, indices, seed, data_seed=0):  # annotations read from another dataset version
        batch = super().make_batch(indices, seed, data_seed)
        other = super().make_batch(indices, seed, data_seed + 7)
        batch.captions, batch.metadata = other.captions, other.metadata
        return batch


class UnseenInTraining(ReferencePipeline):
    def loader(self, split="train", seed=0):  # training captions from an older captioner with other words
        for batch in super().loader(split, seed):
            if split == "train":
                batch.captions = [c.replace("register", "range").replace("drums", "percussion") for c in batch.captions]
            yield batch


# ---- bugs written here: tokens and dropout --------------------------------------------------------

class CharCut(WordTokenizer):
    def encode(self, captions):  # a display helper's 30-character limit left in front of the tokenizer
        return super().encode([c[:30] for c in captions])


class CapitalisedVocab(WordTokenizer):
    def __init__(self, *args, **kwargs):  # vocabulary keys saved capitalised, lookups are lower case
        super().__init__(*args, **kwargs)
        self._ids = {w.capitalize(): i for w, i in self._ids.items()}


def with_tokenizer(cls):
    p = ReferencePipeline()
    p.tokenizer = cls(p.tokenizer.words, max_len=p.tokenizer.max_len)
    return p


class HalfDropout(ReferencePipeline):
    def drop_conditions(self, captions, rng):  # a hard-coded 0.5 from an experiment, the config says 0.1
        dropped = rng.random(len(captions)) < 0.5
        return ["" if d else c for c, d in zip(captions, dropped)], torch.from_numpy(dropped)


# ---- bugs written here: encoder, fusion, gradients ------------------------------------------------

class PartlyFrozen(ReferencePipeline):
    def build_model(self, seed):  # "freeze the pretrained part": but nothing here was pretrained
        model = super().build_model(seed)
        model.text_encoder.encoder.requires_grad_(False)
        model.text_encoder.tokens.requires_grad_(False)
        return model


class CachedTextFeatures(ReferencePipeline):
    def condition(self, model, batch, tap):  # text features "cached" as detached tensors
        cond, mask = super().condition(
            model, batch, lambda s, v, **m: v if s == "condition.embedding" else tap(s, v, **m)
        )
        cond = cond.detach()
        tap("condition.embedding", cond)
        return cond, mask


class DetachedAfterTap(ReferencePipeline):
    def condition(self, model, batch, tap):  # the embedding is tapped live, then detached on its way in
        cond, mask = super().condition(model, batch, tap)
        return cond.detach(), mask


def _patch(model, **methods):
    for name, fn in methods.items():
        setattr(model, name, fn.__get__(model))
    return model


class NullSlotOnly(ReferencePipeline):
    def build_model(self, seed):  # the fusion receives the null slot only, never the caption
        def add_null_slot(self, cond, cond_mask):
            return self.null_cond.expand(cond.shape[0], 1, -1).to(cond.dtype), torch.ones(
                cond.shape[0], 1, dtype=torch.bool
            )

        return _patch(super().build_model(seed), add_null_slot=add_null_slot)


class FirstRowEverywhere(ReferencePipeline):
    def condition(self, model, batch, tap):  # every row gets row 0's embedding (a broadcast from a cache)
        cond, mask = super().condition(
            model, batch, lambda s, v, **m: v if s == "condition.embedding" else tap(s, v, **m)
        )
        cond = cond[:1].expand_as(cond) * mask[..., None]
        tap("condition.embedding", cond)
        return cond, mask


class ZeroGate(ReferencePipeline):
    """Not a bug: gated cross-attention whose gate starts at zero (Flamingo), so a fresh model ignores
    the caption by design. The family must not call it unused."""

    def build_model(self, seed):
        model = super().build_model(seed)
        for block in model.blocks:
            block.gate = torch.nn.Parameter(torch.zeros(1))
            forward = block.cross_attn.forward
            block.cross_attn.forward = lambda x, c, m, _f=forward, _b=block: _b.gate * _f(x, c, m)
        return model


class GuidanceFlag(ReferencePipeline):
    def sampling_config(self, sampling, frames):  # guidance read from a flag the config never sets
        sampling = dict(sampling or {})
        sampling.setdefault("cfg_coef", float(bool(self.cfg.sampling.get("use_cfg"))))
        return super().sampling_config(sampling, frames)


@pytest.mark.parametrize("make,expected", [
    (LengthFilter, ("caption.empty", "caption")),
    (MoodOnly, ("condition.metadata_missing", "metadata")),
    (Reversed, ("caption.mismatch", "caption")),
    (OtherCollection, ("condition.no_relationship", "caption")),
    (UnseenInTraining, ("condition.unseen_words", "condition.tokens")),
    (lambda: with_tokenizer(CharCut), ("caption.truncated", "condition.tokens")),
    (lambda: with_tokenizer(CapitalisedVocab), ("condition.tokens_unknown", "condition.tokens")),
    (HalfDropout, ("condition.dropout_rate", "condition.dropped")),
    (PartlyFrozen, ("condition.encoder_frozen", "condition.embedding")),
    (CachedTextFeatures, ("condition.no_grad", "condition.embedding")),
    (DetachedAfterTap, ("condition.no_grad", "grad")),
    (NullSlotOnly, ("condition.unused", "logits")),
    (FirstRowEverywhere, ("condition.collapsed", "condition.embedding")),
    (GuidanceFlag, ("generation.guidance_off", "generation")),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_own_bug_is_found_at_its_stage(make, expected):
    findings, _ = run(make())
    assert expected in real(findings), real(findings)
    assert not [f for f in findings if f.id == "internal.check_failed"]


def test_a_zero_initialised_gate_is_not_called_unused():
    fresh, _ = run(ZeroGate())
    assert real(fresh) == []
    assert any(f.id == "condition.unused" and f.severity.value == "info" for f in fresh)


def test_catalogue_faults_through_the_protocol_view():
    """Two catalogue faults, through the view that hides the configuration (scored in full by
    `signalchain faults --group conditioning`)."""
    for fault, expected in (("captions_shuffled_once", ("condition.no_relationship", "caption")),
                            ("cfg_coef_zero", ("generation.guidance_off", "generation"))):
        findings, _ = run(ReferencePipeline(faults=[fault]))
        assert expected in real(findings)


def test_data_measurement_reads_golden_and_loader_batches():
    ctx = Context(ProtocolView(ReferencePipeline()), seed=0, budget=BUDGETS["economy"])
    data = measure_condition_data(ctx)
    assert [b.source for b in data.batches] == ["golden"] + ["loader"] * BUDGETS["economy"].cond_batches
    b = data.batches[1]
    assert b.rate == pytest.approx(0.1) and b.ids.shape == b.mask.shape and b.embedding.shape[:2] == b.mask.shape
    assert b.audio_features.shape[0] == len(b.captions) and b.token_features.shape[0] == len(b.captions)
    assert (
        data.prompts == data.batches[0].captions and len(data.training_captions) == 8 * BUDGETS["economy"].cond_batches
    )


def test_sensitivity_of_a_fresh_clean_model():
    ctx = Context(ProtocolView(ReferencePipeline()), seed=0, budget=BUDGETS["economy"])
    s = measure_sensitivity(ctx)
    assert s.rows >= 5 and s.error is None
    assert min(s.logits_change.values()) > 1e-2 and min(s.embedding_change.values()) > 0.5
