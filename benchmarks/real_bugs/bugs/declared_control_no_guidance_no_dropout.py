"""Negative control: no caption dropout in training, and no guidance at sampling (cfg_coef 1).

The same thread as `declared_cfg_without_cond_dropout` (mlfoundations/open-diffusion#6) explains
why dropout matters: only for classifier-free guidance. A run that samples with `cfg_coef=1.0`
(plain conditional sampling) never evaluates the null branch, so training without dropout is fine.
"""

from __future__ import annotations

from dataclasses import replace

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

BUG = RealBug(
    name="declared_control_no_guidance_no_dropout", thread="https://github.com/mlfoundations/open-diffusion/issues/6",
    library="own loop", idiom="AudioCraft-style reference pipeline, cfg_coef 1 (no guidance)", cls="control",
    cause="caption dropout 0 with cfg_coef 1: the null branch is never used, so never needs training",
    fix="nothing to fix", kind="control", symptom="ignores-caption")


def pipeline(fixed: bool = False) -> ReferencePipeline:
    cfg = replace(RefConfig(), cond_dropout=0.0)
    cfg.sampling = {**cfg.sampling, "cfg_coef": 1.0}
    p = ReferencePipeline(cfg)
    p.name = "no-guidance-no-dropout"
    return p


def shows(fixed: bool = False) -> tuple[bool, str]:
    import numpy as np

    p = pipeline()
    loader = p.loader("train", seed=0)
    dropped = 0
    for _ in range(16):
        b = next(loader)
        dropped += int(p.drop_conditions(list(b.captions), np.random.default_rng([b.seed, 2]))[1].sum())
    cfg = float(p.cfg.sampling["cfg_coef"])
    return (dropped == 0 and cfg == 1.0), f"{dropped} captions dropped in 16 batches; cfg_coef {cfg} (no guidance)"
