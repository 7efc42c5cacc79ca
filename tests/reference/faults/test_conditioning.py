"""The conditioning faults: each breaks the caption's path the way its bug would, and only then.

Every symptom is measured directly (taps, gradients, parameters, generated codes, the audio itself),
never through a signalchain detector.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.data import DYNAMICS_DBFS
from signalchain.reference.faults import catalogue, get_fault
from signalchain.reference.text import UNK_ID, split_words

torch.set_num_threads(1)

CFG = RefConfig(batch_size=4)
NAMES = {"caption_key_missing", "metadata_description_dropped", "captions_sorted_apart",
         "caption_max_len_3", "vocab_lookup_inverted", "cond_dropout_inverted", "text_encoder_frozen",
         "text_encoder_no_grad", "cross_attn_cond_detached", "cross_attn_mask_inverted",
         "text_embedding_batch_mean", "captions_shuffled_once", "cfg_coef_zero",
         "training_captions_without_key"}
FAULTS = [f.name for f in catalogue("conditioning")]


@pytest.fixture(scope="module")
def clean() -> ReferencePipeline:
    return ReferencePipeline(CFG)


def _pipe(name: str | None) -> ReferencePipeline:
    return ReferencePipeline(CFG, [name] if name else [])


def _step_trace(p: ReferencePipeline, batch: Any = None, model: Any = None) -> tuple[Any, Any, Any]:
    batch = batch if batch is not None else p.golden_batch(0)
    model = model if model is not None else p.build_model(0)
    with record(values=True) as t:
        out = p.step(model, batch, tap)
    return t, out, model


def _condition_trace(p: ReferencePipeline, batch: Any, model: Any) -> Any:
    """Only the caption path (dropout, tokens, embedding): cheap, no audio or LM."""
    with record(values=True) as t:
        p.condition(model, batch, tap)
    return t


# ---- registration ---------------------------------------------------------------------------------

def test_every_cause_of_the_method_has_a_fault() -> None:
    assert NAMES <= set(FAULTS)
    for name in FAULTS:
        f = get_fault(name)
        assert f.family == "conditioning" and f.expected_ids and f.expected_stage and f.cause
        assert f.section == "The model ignores captions or other controls"
        assert f.symptom == "ignores-caption"


@pytest.mark.parametrize("name", FAULTS)
def test_the_faulty_pipeline_builds_and_steps(name: str) -> None:
    p = _pipe(name)
    out = p.step(p.build_model(0), p.golden_batch(0))
    assert torch.isfinite(out.loss)


# ---- 1. metadata ----------------------------------------------------------------------------------

def test_caption_key_missing_empties_every_caption(clean: ReferencePipeline) -> None:
    p = _pipe("caption_key_missing")
    model = p.build_model(0)
    for batch in (p.golden_batch(0), next(p.loader("train"))):
        t = _condition_trace(p, batch, model)
        assert batch.captions == [""] * len(batch)
        assert not t.value("condition.mask").any()  # every row is the null condition
        assert all(m["description"] for m in batch.metadata)  # the text was there, under another key
    assert all(clean.golden_batch(0).captions)


def test_metadata_description_dropped_leaves_only_the_genre(clean: ReferencePipeline) -> None:
    p = _pipe("metadata_description_dropped")
    t, _, _ = _step_trace(p)
    assert all("description" not in m for m in t.value("metadata"))
    captions = [c for b in (p.golden_batch(0), next(p.loader("train"))) for c in b.captions]
    assert {len(c.split()) for c in captions} == {1}  # "electronic", "folk"...: no tempo, no key
    assert all("description" in m for m in _step_trace(clean)[0].value("metadata"))


# ---- 2. pairing -----------------------------------------------------------------------------------

def _true_caption(p: ReferencePipeline, meta: dict[str, Any]) -> str:
    index = int(str(meta["source_id"]).rsplit("-", 1)[1])
    return ReferencePipeline(CFG).clip(index).caption


def test_captions_sorted_apart_pairs_captions_with_other_clips(clean: ReferencePipeline) -> None:
    p = _pipe("captions_sorted_apart")
    batch = next(p.loader("train"))
    ref = next(clean.loader("train"))  # the same indices, as the clean loader pairs them
    assert sorted(c.shape[-1] for c in batch.clips) == sorted(c.shape[-1] for c in ref.clips)
    # The audio at each row is the clip its metadata names, but the caption is another clip's.
    for clip, meta in zip(batch.clips, batch.metadata):
        index = int(str(meta["source_id"]).rsplit("-", 1)[1])
        assert np.array_equal(clip, clean.clip(index).audio)
    wrong = [c != _true_caption(p, m) for c, m in zip(batch.captions, batch.metadata)]
    assert sum(wrong) >= len(batch) // 2
    assert all(c == _true_caption(clean, m) for c, m in zip(ref.captions, ref.metadata))
    golden = p.golden_batch(0)
    assert sum(c != m["description"] for c, m in zip(golden.captions, golden.metadata)) >= 2


# ---- 3. tokenisation ------------------------------------------------------------------------------

def test_caption_max_len_3_truncates_every_caption(clean: ReferencePipeline) -> None:
    p = _pipe("caption_max_len_3")
    batch = p.golden_batch(0)
    t = _condition_trace(p, batch, p.build_model(0))
    ids = t.value("condition.tokens")
    assert ids.shape == (len(batch), 3) and t["condition.tokens"].meta["max_len"] == 3
    kept = t.value("condition.mask").sum(1)
    words = [len(split_words(c)) for c in batch.captions]
    dropped = t.value("condition.dropped")
    assert all(k == 3 and w >= 15 for k, w, d in zip(kept, words, dropped) if not d)
    ref = _condition_trace(clean, batch, clean.build_model(0))
    assert [int(k) for k, d in zip(ref.value("condition.mask").sum(1), dropped) if not d] == \
           [w for w, d in zip(words, dropped) if not d]


def test_vocab_lookup_inverted_makes_every_word_unknown(clean: ReferencePipeline) -> None:
    p = _pipe("vocab_lookup_inverted")
    captions = clean.golden_batch(0).captions
    ids, mask = p.tokenizer.encode(captions)
    assert mask.any(1).all() and (ids[mask] == UNK_ID).all()
    ids_a, _ = p.tokenizer.encode(["fast warm organ playing wide leaps"])
    ids_b, _ = p.tokenizer.encode(["slow ringing fm bell playing scale"])
    assert torch.equal(ids_a, ids_b)  # different captions, identical input
    ref, ref_mask = clean.tokenizer.encode(captions)
    assert not (ref[ref_mask] == UNK_ID).any()


# ---- 4. dropout -----------------------------------------------------------------------------------

def _dropped_fraction(p: ReferencePipeline, batches: int = 25) -> tuple[float, float]:
    model, loader, dropped = p.build_model(0), p.loader("train"), []
    for _ in range(batches):
        t = _condition_trace(p, next(loader), model)
        dropped += t.value("condition.dropped").tolist()
        rate = t["condition.dropped"].meta["rate"]
    return float(np.mean(dropped)), rate


def test_cond_dropout_inverted_drops_nine_captions_in_ten(clean: ReferencePipeline) -> None:
    frac, rate = _dropped_fraction(_pipe("cond_dropout_inverted"))
    assert rate == pytest.approx(0.1) and frac > 0.75  # the config still says 0.1
    assert _dropped_fraction(clean)[0] < 0.25


# ---- 5 and 7. frozen, no-grad, detached -----------------------------------------------------------

def _encoder_grads(p: ReferencePipeline) -> tuple[list[Any], Any]:
    _, out, model = _step_trace(p)
    out.loss.backward()
    return [q.grad for q in model.text_encoder.parameters()], model


def test_text_encoder_frozen_never_changes(clean: ReferencePipeline) -> None:
    def encoder_change(p: ReferencePipeline) -> float:
        model = p.build_model(0)
        before = [q.detach().clone() for q in model.text_encoder.parameters()]
        opt, batch = p.build_optimizer(model), p.golden_batch(0)
        for _ in range(2):
            p.train_step(model, opt, batch)
        return max(float((q.detach() - b).abs().max()) for q, b in zip(model.text_encoder.parameters(), before))

    p = _pipe("text_encoder_frozen")
    assert not any(q.requires_grad for q in p.build_model(0).text_encoder.parameters())
    assert encoder_change(p) == 0.0
    assert encoder_change(clean) > 0.0


def test_text_encoder_no_grad_cuts_the_embedding_from_the_graph(clean: ReferencePipeline) -> None:
    p = _pipe("text_encoder_no_grad")
    grads, model = _encoder_grads(p)
    assert all(g is None for g in grads)
    assert all(q.requires_grad for q in model.text_encoder.parameters())  # looks trainable
    ids, mask = p.tokenizer.encode(p.golden_batch(0).captions)
    for m in (model, copy.deepcopy(model)):  # a copy keeps the bug, with its own weights
        cond, _ = m.encode_condition(ids, mask)
        assert cond.grad_fn is None and not cond.requires_grad
    clean_grads, _ = _encoder_grads(clean)
    assert all(g is not None for g in clean_grads)


def test_cross_attn_cond_detached_starves_the_encoder_only(clean: ReferencePipeline) -> None:
    p = _pipe("cross_attn_cond_detached")
    grads, model = _encoder_grads(p)
    ids, mask = p.tokenizer.encode(p.golden_batch(0).captions)
    assert model.encode_condition(ids, mask)[0].grad_fn is not None  # the embedding is in the graph
    assert all(g is None for g in grads) and model.null_cond.grad is None
    assert all(b.cross_attn.kv.weight.grad is not None for b in model.blocks)  # the LM side trains
    clean_grads, _ = _encoder_grads(clean)
    assert sum(float(g.abs().sum()) for g in clean_grads if g is not None) > 0


# ---- 6. fusion and collapse -----------------------------------------------------------------------

def _caption_effect_on_logits(p: ReferencePipeline) -> float:
    batch, model = p.golden_batch(0), p.build_model(0)
    with torch.no_grad():
        a = p.step(model, batch).logits
        b = p.step(model, p.with_captions(batch, batch.captions[::-1])).logits
    return float((a - b).abs().max())


def test_cross_attn_mask_inverted_makes_logits_ignore_the_caption(clean: ReferencePipeline) -> None:
    assert _caption_effect_on_logits(_pipe("cross_attn_mask_inverted")) < 1e-5
    assert _caption_effect_on_logits(clean) > 1e-3


def test_text_embedding_batch_mean_gives_every_caption_one_embedding(clean: ReferencePipeline) -> None:
    def spread(p: ReferencePipeline) -> float:
        batch, model = p.golden_batch(0), p.build_model(0)
        ids, mask = p.tokenizer.encode(batch.captions)  # no dropout: every row has words
        with torch.no_grad():
            emb = model.encode_condition(ids, mask)[0]  # [B, L, D]
        both = mask.all(0)  # positions where every caption has a word
        return float((emb[:, both] - emb[:1, both]).abs().max())

    assert spread(_pipe("text_embedding_batch_mean")) == 0.0
    assert spread(clean) > 1e-3


# ---- 8. no relationship ---------------------------------------------------------------------------

def _loudness_agreement(p: ReferencePipeline, n: int = 40) -> float:
    """Share of clips whose caption's "soft"/"loud" agrees with the clip's measured RMS."""
    threshold = float(np.mean(list(DYNAMICS_DBFS.values())))
    agree = []
    for i in range(n):
        clip = p.clip(i)
        rms_db = 10 * np.log10(np.mean(clip.audio.astype(np.float64) ** 2))
        said_loud = re.search(r"\bloud\b", clip.caption) is not None
        agree.append(said_loud == (rms_db > threshold))
    return float(np.mean(agree))


def test_captions_shuffled_once_breaks_the_caption_audio_relationship(clean: ReferencePipeline) -> None:
    p = _pipe("captions_shuffled_once")
    assert _loudness_agreement(clean) > 0.95
    assert _loudness_agreement(p) < 0.8
    # Consistent, not a pairing glitch: the same clip always has the same (wrong) caption, and
    # its metadata agrees with it.
    batches = [p.make_batch([3, 5, 7, 11], seed=s) for s in (0, 1)]
    assert batches[0].captions == batches[1].captions
    assert all(c == m["description"] for c, m in zip(batches[0].captions, batches[0].metadata))
    golden = p.golden_batch(0)
    assert golden.captions != clean.golden_batch(0).captions
    assert golden.captions == p.golden_batch(0).captions


# ---- 9. guidance ----------------------------------------------------------------------------------

def _codes_change_with_caption(p: ReferencePipeline, model: Any) -> bool:
    batch = p.golden_batch(0)
    a = p.generate(model, batch, {"max_frames": 25}).codes
    b = p.generate(model, p.with_captions(batch, batch.captions[::-1]), {"max_frames": 25}).codes
    return not torch.equal(a, b)


def test_cfg_coef_zero_generates_the_same_codes_for_any_caption(clean: ReferencePipeline) -> None:
    p = _pipe("cfg_coef_zero")
    model = clean.build_model(0)
    assert p.sampling_config(None, 25).cfg_coef == 0.0
    assert not _codes_change_with_caption(p, model)
    assert _codes_change_with_caption(clean, model)


# ---- 10. unseen prompt words ----------------------------------------------------------------------

def _unseen_prompt_ids(p: ReferencePipeline, batches: int = 12) -> set[int]:
    loader = p.loader("train")
    trained: set[int] = set()
    for _ in range(batches):
        ids, _ = p.tokenizer.encode(next(loader).captions)
        trained |= set(ids.unique().tolist())
    prompt_ids, _ = p.tokenizer.encode(p.golden_batch(0).captions)  # the evaluation prompts
    return set(prompt_ids.unique().tolist()) - trained


def test_training_captions_without_key_leave_prompt_words_untrained(clean: ReferencePipeline) -> None:
    p = _pipe("training_captions_without_key")
    unseen = p.tokenizer.decode(torch.tensor([sorted(_unseen_prompt_ids(p))]))[0].split()
    assert {"in", "minor"} <= set(unseen)
    assert not _unseen_prompt_ids(clean)
    assert " in " in p.golden_batch(0).captions[0]
    small = ReferencePipeline(RefConfig(batch_size=4, train_size=8, valid_size=4),
                              ["training_captions_without_key"])
    assert all(" in " not in c.caption for c in small.training_examples())
    assert all(" in " not in c.caption for c in small.splits()["train"])
    assert all(" in " in c.caption for c in small.splits()["valid"])
