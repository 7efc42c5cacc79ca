"""The HF bed's mixed-precision faults: skipped steps read off the parameters (unchanged after a
step) and the loss scale read off the `amp.scale` tap."""

from __future__ import annotations

import torch
from hf_bed_support import changed, check_registered, setup, snapshot

from signalchain import record, tap

torch.set_num_threads(1)

NAMES = {"scaler_built_every_step", "loss_scaled_twice"}


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("precision", NAMES, "Mixed-precision failures")


def _run(p, golden, steps: int) -> tuple[list[float], list[bool], list[float]]:
    model, opt = setup(p)
    scales, moved, curve = [], [], []
    for _ in range(steps):
        before = snapshot(model, "decoder.")
        with record(values=["amp.scale"]) as t:
            curve.append(float(p.train_step(model, opt, golden, tap).loss.detach()))
        scales.append(float(t.value("amp.scale")))
        moved.append(bool(changed(model, before)))
    return scales, moved, curve


def test_clean_fp16_bed_steps_every_time(bed, golden) -> None:
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline

    scales, moved, curve = _run(HFBedPipeline(HFBedConfig(amp="fp16")), golden, 4)
    assert all(moved) and len(set(scales)) == 1 and curve[-1] < curve[0]


def test_scaler_built_every_step_skips_every_step(bed, golden) -> None:
    p = bed.with_faults(["scaler_built_every_step"])
    assert p.amp == "fp16"
    scales, moved, curve = _run(p, golden, 6)
    assert not any(moved)
    assert all(s == 2.0**31 for s in scales)  # one halving, then a fresh scaler at 2**32 again
    assert max(curve) - min(curve) < 1e-3


def test_loss_scaled_twice_collapses_the_scale(bed, golden) -> None:
    p = bed.with_faults(["loss_scaled_twice"])
    scales, moved, _ = _run(p, golden, 12)
    assert not any(moved[:4])  # the first steps overflow and are skipped
    assert scales[-1] <= 65536.0 / 64 and all(b <= a for a, b in zip(scales, scales[1:]))
