"""The HF bed's conditioning faults: the caption followed from the dataset rows through the tokens,
the text encoder's gradients and updates, to the logits' response to another caption."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_bed_support import changed, check_registered, setup, snapshot, trace

torch.set_num_threads(1)

NAMES = {"captions_joined_by_row_order", "caption_max_length_from_duration", "dropout_rate_in_percent",
         "freeze_fresh_text_encoder", "text_encoder_under_no_grad", "text_encoder_not_in_optimizer",
         "encoder_states_not_passed", "cfg_batch_doubled_in_training"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("conditioning", NAMES, "The model ignores captions or other controls")


@pytest.mark.parametrize("name", sorted(NAMES))
def test_fault_trains_without_an_error(bed, golden, name: str) -> None:
    p = bed.with_faults([name])
    model, opt = setup(p)
    assert torch.isfinite(p.train_step(model, opt, golden).loss)


def test_captions_joined_by_row_order_pair_clips_with_other_captions(bed) -> None:
    p = bed.with_faults(["captions_joined_by_row_order"])
    own = {e.source_id: e.caption for e in bed.examples}
    moved = [e for e in p.examples if e.caption != own[e.source_id]]
    assert len(moved) > 0.8 * len(p.examples)
    assert sorted(e.caption for e in p.examples) == sorted(own.values())  # the same captions, other clips
    assert all(e.metadata == c.metadata for e, c in zip(p.examples, bed.examples))  # sidecars stay with the audio


def _token_counts(t) -> list[int]:
    return np.asarray(t.value("condition.mask")).sum(axis=1).tolist()


def test_caption_max_length_from_duration_truncates_every_caption(bed, golden) -> None:
    p = bed.with_faults(["caption_max_length_from_duration"])
    t, clean = trace(p, setup(p)[0], golden), trace(bed, setup(bed)[0], golden)
    kept = [n for n, d in zip(_token_counts(clean), np.asarray(clean.value("condition.dropped"))) if not d]
    assert min(kept) > 8  # clean captions are 9-20 tokens
    assert max(_token_counts(t)) <= 5 and np.asarray(t.value("condition.tokens")).shape[1] <= 5


def test_dropout_rate_in_percent_drops_every_caption(bed) -> None:
    p = bed.with_faults(["dropout_rate_in_percent"])
    model, _ = setup(p)
    for seed in range(3):
        t = trace(p, model, p.golden_batch(seed))
        assert np.asarray(t.value("condition.dropped")).all()
        assert max(_token_counts(t)) == 1  # only the end-of-text token of the empty caption
    clean = np.concatenate([np.asarray(trace(bed, setup(bed)[0], bed.golden_batch(s)).value("condition.dropped"))
                            for s in range(3)])
    assert clean.mean() < 0.5


def test_freeze_fresh_text_encoder_keeps_it_at_init(bed, golden) -> None:
    p = bed.with_faults(["freeze_fresh_text_encoder"])
    model, opt = setup(p)
    assert not any(q.requires_grad for q in model.text_encoder.parameters())
    before = snapshot(model, "text_encoder.")
    for _ in range(2):
        p.train_step(model, opt, golden)
    assert not changed(model, before)
    norms = [q for n, q in model.text_encoder.named_parameters() if "layer_norm" in n]
    assert norms and all(torch.equal(q, torch.ones_like(q)) for q in norms)  # never trained: still the init
    clean_model, clean_opt = setup(bed)
    before = snapshot(clean_model, "text_encoder.")
    bed.train_step(clean_model, clean_opt, golden)
    assert changed(clean_model, before)


def _text_grads(p, model, batch) -> list[torch.Tensor | None]:
    model.zero_grad(set_to_none=True)
    p.step(model, batch).loss.backward()
    return [q.grad for q in model.text_encoder.parameters()]


def test_text_encoder_under_no_grad_gets_no_gradient(bed, golden) -> None:
    p = bed.with_faults(["text_encoder_under_no_grad"])
    model, _ = setup(p)
    assert all(q.requires_grad for q in model.text_encoder.parameters())
    assert all(g is None for g in _text_grads(p, model, golden))
    assert model.enc_to_dec_proj.weight.grad is not None  # the projection, after the no_grad block, still learns
    clean_model, _ = setup(bed)
    assert all(g is not None for g in _text_grads(bed, clean_model, golden))


def test_text_encoder_not_in_optimizer_gets_gradients_but_never_moves(bed, golden) -> None:
    p = bed.with_faults(["text_encoder_not_in_optimizer"])
    model, opt = setup(p)
    held = {id(q) for g in opt.param_groups for q in g["params"]}
    text = list(model.text_encoder.parameters()) + list(model.enc_to_dec_proj.parameters())
    assert not any(id(q) in held for q in text) and all(q.requires_grad for q in text)
    assert any(g is not None and g.abs().sum() > 0 for g in _text_grads(p, model, golden))
    model.zero_grad(set_to_none=True)
    before = snapshot(model, "text_encoder.") | snapshot(model, "enc_to_dec_proj.")
    for _ in range(2):
        p.train_step(model, opt, golden)
    assert not changed(model, before)


def test_encoder_states_not_passed_logits_ignore_the_caption(bed, golden) -> None:
    other = bed.with_captions(golden, list(reversed(golden.captions)))
    p = bed.with_faults(["encoder_states_not_passed"])
    model, _ = setup(p)
    with torch.no_grad():
        a, b = p.step(model, golden), p.step(model, other)
        assert torch.equal(a.logits, b.logits)
        clean, _ = setup(bed)
        assert not torch.allclose(bed.step(clean, golden).logits, bed.step(clean, other).logits)


def test_cfg_batch_doubled_in_training_trains_a_null_copy_of_every_example(bed, golden) -> None:
    p = bed.with_faults(["cfg_batch_doubled_in_training"])
    model, _ = setup(p)
    seen = []
    model.text_encoder.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["attention_mask"].clone()),
                                                 with_kwargs=True)
    with torch.no_grad():
        out = p.step(model, golden)
    b, _, k = out.targets.shape
    assert out.logits.shape[0] == 2 * b * k  # outputs for twice the batch the labels describe
    mask = seen[0]
    assert mask.shape[0] == 2 * b and not mask[b:].any() and mask[:b].any()  # the second half: no caption at all
    with torch.no_grad():
        ids, m = p.tokenize(golden.captions)
        cond = model(input_ids=ids, attention_mask=m, labels=out.targets).loss
        null = model(input_ids=ids, attention_mask=torch.zeros_like(m), labels=out.targets).loss
    assert float(out.loss) == pytest.approx((float(cond) + float(null)) / 2, rel=1e-4)


@pytest.mark.parametrize("fault", [None, "encoder_states_not_passed"])
def test_bf16_autocast_response_judged_on_the_float32_twin(fault) -> None:
    """Zoo member hf-bf16: under bf16 autocast a fresh model's response to the caption (≈ 0.003 of the
    logits' spread) sits under bf16 rounding (8 eps = 0.06), so it is measured on the float32 twin of
    the same ops: clean, no error; the fusion cut, still `condition.unused`."""
    from signalchain.checks.conditioning_model import judge_sensitivity
    from signalchain.experiments.conditioning_sensitivity import measure_sensitivity
    from signalchain.experiments.context import BUDGETS, Context
    from signalchain.pipeline import ProtocolView
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline

    p = HFBedPipeline(HFBedConfig(amp="bf16"), faults=[fault] if fault else [])
    s = measure_sensitivity(Context(ProtocolView(p), seed=0, budget=BUDGETS["economy"]))
    assert s.upcast_from == "bfloat16" and s.eps == float(torch.finfo(torch.float32).eps)
    ids = [(f.id, f.severity.value) for f in judge_sensitivity(s)]
    if fault is None:
        assert max(s.logits_change.values()) > s.floor and ids == []
    else:
        assert ids == [("condition.unused", "error")]
