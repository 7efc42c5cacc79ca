"""The HF bed's flat-loss faults: each cuts (or fakes) one link of labels -> loss -> gradients ->
optimiser -> parameters, measured on the tensors themselves against the clean bed."""

from __future__ import annotations

import itertools

import pytest
import torch
from hf_bed_support import (
    as_inputs,
    changed,
    check_registered,
    decoder_inputs,
    losses,
    setup,
    snapshot,
)

torch.set_num_threads(1)

NAMES = {"trainer_default_lr", "decoder_frozen_for_lora", "zero_grad_after_backward", "accumulation_counter_in_branch",
         "loss_from_no_grad_forward", "stale_hidden_hook", "decoder_inputs_shifted_twice", "decoder_inputs_are_labels"}


@pytest.fixture(scope="module")
def clean_curve(bed, golden) -> list[float]:
    model, opt = setup(bed)
    return losses(bed, model, opt, golden, 8)


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("flat_loss", NAMES, "Loss does not decrease")


@pytest.mark.parametrize("name", sorted(NAMES))
def test_fault_trains_without_an_error(bed, golden, name: str) -> None:
    p = bed.with_faults([name])
    model, opt = setup(p)
    out = p.train_step(model, opt, golden)
    assert out.logits.shape[0] == out.targets.shape[0] * out.targets.shape[2]


def test_trainer_default_lr_schedules_a_rate_of_zero(bed, golden, clean_curve) -> None:
    """The schedule built for 0 training steps holds every group's rate at 0: nothing moves."""
    p = bed.with_faults(["trainer_default_lr"])
    model, opt = setup(p)
    assert all(g["initial_lr"] > 0 and g["lr"] == 0.0 for g in opt.param_groups)
    before = snapshot(model)
    curve = losses(p, model, opt, golden, 4)
    assert all(g["lr"] == 0.0 for g in opt.param_groups)
    assert not changed(model, before) and curve[0] == curve[-1]
    assert clean_curve[0] - clean_curve[-1] > 0.5


def test_decoder_frozen_for_lora_trains_only_the_condition(bed, golden) -> None:
    p = bed.with_faults(["decoder_frozen_for_lora"])
    model, opt = setup(p)
    assert not any(q.requires_grad for q in model.decoder.parameters())
    before = snapshot(model)
    p.train_step(model, opt, golden)
    moved = changed(model, before)
    assert moved and all(n.startswith(("text_encoder.", "enc_to_dec_proj.")) for n in moved)
    clean_model, clean_opt = setup(bed)
    before = snapshot(clean_model, "decoder.")
    bed.train_step(clean_model, clean_opt, golden)
    assert changed(clean_model, before)


def test_zero_grad_after_backward_leaves_nothing_to_step(bed, golden) -> None:
    from signalchain import record, tap

    p = bed.with_faults(["zero_grad_after_backward"])
    model, opt = setup(p)
    before = snapshot(model)
    with record(values=["grad.norm"]) as t:
        p.train_step(model, opt, golden, tap)
    assert float(t.value("grad.norm")) == 0.0
    assert not changed(model, before)
    assert all(q.grad is None for q in model.parameters())


def test_accumulation_counter_in_branch_never_steps(bed, golden) -> None:
    p = bed.with_faults(["accumulation_counter_in_branch"])
    model, opt = setup(p)
    before = snapshot(model)
    head = model.decoder.lm_heads[0].weight
    norms = []
    for _ in range(6):  # more than the accumulation window of 4
        p.train_step(model, opt, golden)
        norms.append(float(head.grad.norm()))
    assert not changed(model, before)
    assert norms[-1] > 3 * norms[0]  # gradients pile up, never cleared by a step


def test_loss_from_no_grad_forward_is_cut_from_the_model(bed, golden) -> None:
    p = bed.with_faults(["loss_from_no_grad_forward"])
    model, opt = setup(p)
    out = p.step(model, golden)
    assert out.loss.requires_grad and out.loss.grad_fn is None  # a leaf: nothing behind it
    out.loss.backward()
    assert all(q.grad is None for q in model.parameters())
    before = snapshot(model)
    p.train_step(model, opt, golden)
    assert not changed(model, before)


def test_stale_hidden_hook_gives_two_batches_the_same_logits(bed, golden) -> None:
    other = bed.golden_batch(1)
    p = bed.with_faults(["stale_hidden_hook"])
    model, _ = setup(p)
    with torch.no_grad():
        a, b = p.step(model, golden), p.step(model, other)
        assert not torch.equal(a.targets, b.targets)
        assert torch.equal(a.logits, b.logits)
        clean, _ = setup(bed)
        assert not torch.equal(bed.step(clean, golden).logits, bed.step(clean, other).logits)


def test_decoder_inputs_shifted_twice_lag_the_labels_by_two(bed, golden) -> None:
    p = bed.with_faults(["decoder_inputs_shifted_twice"])
    model, _ = setup(p)
    ids, labels = decoder_inputs(p, model, golden)
    lab = as_inputs(labels, p.pad_token_id)
    assert torch.equal(ids[:, 2:], lab[:, :-2])
    assert not torch.equal(ids[:, 1:], lab[:, :-1])
    clean_ids, clean_labels = decoder_inputs(bed, setup(bed)[0], golden)
    assert torch.equal(clean_ids[:, 1:], as_inputs(clean_labels, bed.pad_token_id)[:, :-1])  # HF's one shift


def _valid_loss(p, model, n_valid: int = 2) -> float:
    batches = list(itertools.islice(p.loader("valid", seed=3), n_valid))
    with torch.no_grad():
        model.eval()
        return sum(float(p.step(model, b).loss) for b in batches) / len(batches)


def test_decoder_inputs_are_labels_feeds_each_position_its_target(bed, golden) -> None:
    p = bed.with_faults(["decoder_inputs_are_labels"])
    ids, labels = decoder_inputs(p, setup(p)[0], golden)
    assert torch.equal(ids, as_inputs(labels, p.pad_token_id))  # position t is fed the code it must predict


@pytest.mark.slow
def test_decoder_inputs_are_labels_makes_validation_too_good() -> None:
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline

    # A faster rate than the bed's (both runs alike), so that copying is learnt within 40 updates.
    clean = HFBedPipeline(HFBedConfig(lr=1e-2))
    p = clean.with_faults(["decoder_inputs_are_labels"])
    model, opt = setup(p)
    clean_model, clean_opt = setup(clean)
    for batch in itertools.islice(clean.loader("train", seed=1), 40):
        p.train_step(model, opt, batch)
        clean.train_step(clean_model, clean_opt, batch)
    assert _valid_loss(p, model) < _valid_loss(clean, clean_model) - 0.4
