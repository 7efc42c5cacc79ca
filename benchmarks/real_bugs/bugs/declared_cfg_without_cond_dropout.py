"""Classifier-free guidance at generation, but training never drops the caption.

mlfoundations/open-diffusion#6: the reporter could not find where captions are randomly dropped for
classifier-free guidance, although guidance was used at sampling; the maintainer confirmed the repo
left the text dropout out (the unconditional branch is never trained) and offered to add it: replace
a share of the captions with the empty string during training. Reproduced in a MusicGen-style
(AudioCraft-like) reference pipeline whose config sets `cond_dropout=0.0` while sampling keeps
`cfg_coef=3.0`; the fix trains with the usual 10 % of null captions.
"""

from __future__ import annotations

from dataclasses import replace

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

BUG = RealBug(
    name="declared_cfg_without_cond_dropout", thread="https://github.com/mlfoundations/open-diffusion/issues/6",
    library="own loop (diffusers-style CFG)", idiom="AudioCraft-style reference pipeline, cfg_coef 3 at sampling",
    cls="declared-vs-done",
    cause="sampling uses classifier-free guidance (cfg_coef 3) but training drops no caption (dropout 0): "
          "the null-condition branch the guidance subtracts is never trained",
    fix="drop ~10 % of the captions (replace by the empty caption) during training",
    stages=("condition.dropped",), cause_ids=("condition.dropout_rate", "generation.guidance_untrained"),
    symptom="ignores-caption")


def config(fixed: bool) -> RefConfig:
    return replace(RefConfig(), cond_dropout=0.1 if fixed else 0.0)


def pipeline(fixed: bool) -> ReferencePipeline:
    p = ReferencePipeline(config(fixed))
    p.name = "cfg-no-dropout" if not fixed else "cfg-with-dropout"
    return p


def shows(fixed: bool) -> tuple[bool, str]:
    """Over 16 training batches: how many captions were replaced by the null one, while sampling guides."""
    import numpy as np

    p = pipeline(fixed)
    loader = p.loader("train", seed=0)
    dropped = total = 0
    for _ in range(16):
        b = next(loader)
        _, d = p.drop_conditions(list(b.captions), np.random.default_rng([b.seed, 2]))
        dropped += int(d.sum())
        total += len(d)
    cfg = float(p.cfg.sampling["cfg_coef"])
    return (cfg > 1.0 and dropped == 0), f"{dropped}/{total} captions dropped in training; cfg_coef {cfg}"
