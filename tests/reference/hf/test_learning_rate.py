"""The HF bed's learning-rate faults: the rate is read off the optimiser (or the schedule's taps)
and its effect off the loss curve and the parameter updates."""

from __future__ import annotations

import pytest
import torch
from hf_bed_support import check_registered, losses, setup, snapshot

from signalchain import record, tap

torch.set_num_threads(1)

NAMES = {"scale_lr_by_world_size", "warmup_lambda_unclamped", "text_lr_ratio_inverted"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("learning_rate", NAMES, "Learning rate problems")


@pytest.fixture(scope="module")
def clean_curve(bed, golden) -> list[float]:
    model, opt = setup(bed)
    return losses(bed, model, opt, golden, 10)


def test_scale_lr_by_world_size_diverges(bed, golden, clean_curve) -> None:
    p = bed.with_faults(["scale_lr_by_world_size"])
    model, opt = setup(p)
    assert opt.param_groups[0]["lr"] == pytest.approx(128 * bed.lr)
    curve = losses(p, model, opt, golden, 10)
    assert max(curve[1:]) > curve[0] + 2.0 and curve[-1] > curve[0]  # thrown far above the start, stays there
    assert max(clean_curve[1:]) < clean_curve[0] and clean_curve[-1] < clean_curve[0] - 1.0


def test_warmup_lambda_unclamped_keeps_raising_the_rate(bed, golden) -> None:
    p = bed.with_faults(["warmup_lambda_unclamped"])
    model, opt = setup(p)
    norm0 = float(torch.cat([q.detach().flatten() for q in model.decoder.parameters()]).norm())
    lrs, curve = [], []
    for _ in range(16):
        with record(values=["lr"]) as t:
            curve.append(float(p.train_step(model, opt, golden, tap).loss.detach()))
        lrs.append(float(t.value("lr")))
    assert all(b > a for a, b in zip(lrs, lrs[1:])) and lrs[-1] > 100 * bed.lr
    jumps = [b - a for a, b in zip(curve, curve[1:])]
    assert max(jumps) > 1.0  # the loss spikes as the rate climbs
    norm = float(torch.cat([q.detach().flatten() for q in model.decoder.parameters()]).norm())
    clean_model, clean_opt = setup(bed)
    clean_curve = losses(bed, clean_model, clean_opt, golden, 16)
    clean_norm = float(torch.cat([q.detach().flatten() for q in clean_model.decoder.parameters()]).norm())
    assert max(b - a for a, b in zip(clean_curve, clean_curve[1:])) < 0.2
    assert norm / norm0 > 2 * (clean_norm / norm0)  # the weights blow up


def _text_change(p, model, opt, batch) -> float:
    before = snapshot(model, "text_encoder.")
    p.train_step(model, opt, batch)
    now = dict(model.named_parameters())
    num = sum(float((now[n].detach() - q).norm() ** 2) for n, q in before.items()) ** 0.5
    den = sum(float(q.norm() ** 2) for q in before.values()) ** 0.5
    return num / den


def test_text_lr_ratio_inverted_throws_the_text_encoder_around(bed, golden) -> None:
    p = bed.with_faults(["text_lr_ratio_inverted"])
    model, opt = setup(p)
    decoder_lr, text_lr = (g["lr"] for g in opt.param_groups)
    assert text_lr == pytest.approx(10 * decoder_lr)
    clean_model, clean_opt = setup(bed)
    assert clean_opt.param_groups[1]["lr"] == pytest.approx(text_lr / 100)
    faulty = [_text_change(p, model, opt, golden) for _ in range(3)]
    clean = [_text_change(bed, clean_model, clean_opt, golden) for _ in range(3)]
    assert min(faulty) > 20 * max(clean)
