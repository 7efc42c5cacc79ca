"""The conditioning family: trace the caption from the metadata to the generated output, stage by stage.

metadata → caption → pairing with the audio → condition dropout → condition tokens → embedding →
fusion (logits) → gradients → guidance at generation. Each stage found broken explains the stages
after it, so later judges read the findings made before them.
"""

from __future__ import annotations

import math

from ...checks.base import make
from ...checks.conditioning import CAPTION_CHECKS, judge_guidance_dropout
from ...checks.conditioning_model import (
    caption_sensitive,
    fusion_silent,
    judge_collapse,
    judge_condition_grads,
    judge_guidance,
    judge_sensitivity,
)
from ...checks.conditioning_relationship import judge_relationship, relationship
from ...findings import Finding
from ...records.conditioning import ConditionData, Sensitivity
from ...records.figures import Bars, Figure, Table
from ..conditioning import (
    measure_condition_data,
    measure_condition_grads,
    measure_declared_guidance,
    measure_guidance,
)
from ..conditioning_sensitivity import measure_sensitivity
from ..context import Context, Knob
from ..doctor import FAMILY, SELF, Family, Step, judge, register

__all__: list[str] = []

SUSPICION_STEPS = 3  # updates before asking again whether the logits follow the caption

KNOBS = {
    "cond_batches": Knob(4, 8, 16, "loader batches traced up to the condition"),
    "cond_examples": Knob(False, False, True, "also read every training caption via training_examples() (slow)"),
    "guidance_frames": Knob(8, 8, 16, "frames generated per guidance probe"),
}


def _golden_table(data: ConditionData) -> Table:
    """The golden batch's captions beside what the condition made of them."""
    b = data.batches[0]
    rows = []
    for i, caption in enumerate(b.captions):
        dropped = bool(b.dropped[i]) if b.dropped is not None and i < len(b.dropped) else None
        tokens = int(b.mask[i].sum()) if b.mask is not None and i < len(b.mask) else None
        rows.append([i, caption, dropped, f"{tokens}/{b.max_len}" if tokens is not None else "—"])
    return Table("Golden batch: caption → condition", ["row", "caption", "dropped", "tokens"], rows)


def no_caption(data: ConditionData) -> list[Finding]:
    if data.batches:
        return []
    return [make("pipeline.capability_missing", "info", None,
                 "the conditioning family did not run: the step taps no `caption` stage", "checks.conditioning",
                 hint="tap('caption', captions) in the step (and condition.dropped/tokens/mask/embedding after it)")]


def _show_golden(data: ConditionData) -> dict[str, Figure]:
    return {"conditioning.golden": _golden_table(data)} if data.batches[0].source == "golden" else {}


def _show_relationship(views: dict[str, dict[str, float]]) -> dict[str, Figure]:
    if not views:
        return {}
    return {"conditioning.relationship": Bars(
        "Caption words vs paired data (z against random pairings; ≥ 3 = related)",
        {k: round(v["z"], 2) for k, v in views.items()}, x_label="z", logx=False)}


def _show_sensitivity(sens: Sensitivity) -> dict[str, Figure]:
    return {"conditioning.sensitivity": Bars(
        "Logit change when the caption is replaced (relative to logit spread)",
        {k: v for k, v in sens.logits_change.items() if math.isfinite(v)}, x_label="mean |Δ logits| / std",
        logx=False)}


def _relationship(ctx: Context, data: ConditionData) -> dict[str, dict[str, float]]:
    return relationship(data)


def _suspicion(ctx: Context) -> Sensitivity:
    """Only when the fresh model ignores the caption: is it a zero-initialised gate?"""
    return measure_sensitivity(ctx, steps=SUSPICION_STEPS)


def _silent(ctx: Context) -> bool:
    return fusion_silent(ctx.result("conditioning.sensitivity"))


def _sensitive(ctx: Context) -> bool:
    return caption_sensitive(ctx.result("conditioning.sensitivity"))


DATA = "conditioning.data"
SENS = "conditioning.sensitivity"

register(
    Family(
        "conditioning",
        "Conditioning path: metadata, pairing, tokens, dropout, encoder, fusion, gradients, guidance",
        after=("precision",),
        knobs=KNOBS,
        steps=(
            Step(
                "data",
                say="conditioning: captions, metadata, tokens, dropout",
                measure=measure_condition_data,
                isolated=False,
                judges=(no_caption,),
                stop=lambda data: not data.batches,
            ),
            Step("captions", reads=(DATA,), judges=tuple(judge(c, DATA) for c in CAPTION_CHECKS), show=_show_golden),
            Step("loader", needs=("loader",), needed_by="checks.conditioning (dropout rate, pairing, relationship)"),
            Step(
                "relationship",
                measure=_relationship,
                reads=(DATA,),
                empty_ok=True,
                judges=(judge(judge_relationship, DATA, SELF), judge(judge_collapse, DATA, FAMILY)),
                show=_show_relationship,
            ),
            Step(
                "sensitivity",
                needs=("with_captions",),
                needed_by="checks.conditioning (fusion, guidance)",
                say="conditioning: does the model use the caption",
                measure=measure_sensitivity,
                isolated=False,
            ),
            Step("suspicion", when=_silent, needs=("with_captions",), measure=_suspicion, timing=SENS, isolated=False),
            Step(
                "fusion",
                needs=("with_captions",),
                reads=(SENS,),
                show=_show_sensitivity,
                judges=(judge(judge_sensitivity, SELF, FAMILY, "conditioning.suspicion"),),
            ),
            Step(
                "grads",
                needs=("condition_parameters",),
                needed_by="checks.conditioning.judge_condition_grads",
                say="conditioning: gradient reach",
                measure=measure_condition_grads,
                isolated=False,
                judges=(judge(judge_condition_grads, SELF, FAMILY),),
            ),
            Step("generate", needs=("generate",), needed_by="checks.conditioning.judge_guidance"),
            Step(
                "guidance_declared",
                needs=("generate",),
                say="conditioning: the guidance generate applies",
                measure=measure_declared_guidance,
                judges=(judge(judge_guidance_dropout, SELF, DATA),),
            ),
            Step(
                "guidance",
                when=_sensitive,
                needs=("generate",),
                say="conditioning: guidance at generation",
                measure=measure_guidance,
                isolated=False,
                judges=(judge(judge_guidance, SELF, SENS),),
            ),
        ),
    )
)
