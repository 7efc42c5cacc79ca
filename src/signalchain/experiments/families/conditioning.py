"""The conditioning family: trace the caption from the metadata to the generated output, stage by stage.

metadata → caption → pairing with the audio → condition dropout → condition tokens → embedding →
fusion (logits) → gradients → guidance at generation. Each stage found broken explains the stages
after it, so later judges read the findings made before them.
"""

from __future__ import annotations

import math

from ...checks.base import make, run_check
from ...checks.conditioning import CAPTION_CHECKS, judge_relationship, relationship
from ...checks.conditioning_model import (
    caption_sensitive,
    fusion_silent,
    judge_collapse,
    judge_condition_grads,
    judge_guidance,
    judge_sensitivity,
)
from ...findings import Finding
from ...pipeline import capabilities, missing_capability
from ...records.conditioning import ConditionData
from ..conditioning import (
    measure_condition_data,
    measure_condition_grads,
    measure_guidance,
    measure_sensitivity,
)
from ..context import Context
from ..doctor import family

__all__: list[str] = []

SUSPICION_STEPS = 3  # updates before asking again whether the logits follow the caption


def _need(ctx: Context, capability: str, by: str) -> list[Finding]:
    f = missing_capability(ctx.pipeline, capability, by)
    return [f] if f is not None else []


def _golden_table(data: ConditionData) -> dict:
    """The golden batch's captions beside what the condition made of them."""
    b = data.batches[0]
    rows = []
    for i, caption in enumerate(b.captions):
        dropped = bool(b.dropped[i]) if b.dropped is not None and i < len(b.dropped) else None
        tokens = int(b.mask[i].sum()) if b.mask is not None and i < len(b.mask) else None
        rows.append([i, caption, dropped, f"{tokens}/{b.max_len}" if tokens is not None else "—"])
    return {"kind": "table", "title": "Golden batch: caption → condition", "headers": ["row", "caption", "dropped", "tokens"],
            "rows": rows}


@family("conditioning", "Conditioning path: metadata, pairing, tokens, dropout, encoder, fusion, gradients, guidance")
def conditioning_family(ctx: Context) -> list[Finding]:
    p = ctx.pipeline
    caps = capabilities(p)
    out: list[Finding] = []
    ctx.say("conditioning: captions, metadata, tokens, dropout")
    with ctx.timed("conditioning.data"):
        data = measure_condition_data(ctx)
    if not data.batches:
        return [_no_caption(ctx)]
    for check in CAPTION_CHECKS:
        out += run_check(f"checks.conditioning.{check.__name__}", check, data)
    if "loader" not in caps:
        out += _need(ctx, "loader", "checks.conditioning (dropout rate, pairing, relationship)")
    views: dict[str, dict[str, float]] = {}

    def related(d: ConditionData) -> list[Finding]:
        views.update(relationship(d))
        return judge_relationship(d, views)

    with ctx.timed("conditioning.relationship"):
        out += run_check("checks.conditioning.judge_relationship", related, data)
    out += run_check("checks.conditioning.judge_collapse", judge_collapse, data, out)
    if data.batches[0].source == "golden":
        ctx.metrics["conditioning.golden"] = _golden_table(data)
    if views:
        ctx.metrics["conditioning.relationship"] = {
            "kind": "bars", "title": "Caption words vs paired data (z against random pairings; ≥ 3 = related)",
            "values": {k: round(v["z"], 2) for k, v in views.items()}, "x_label": "z", "logx": False}

    if "with_captions" in caps:
        ctx.say("conditioning: does the model use the caption")
        with ctx.timed("conditioning.sensitivity"):
            sens = measure_sensitivity(ctx)
            # Only when the fresh model ignores the caption: is it a zero-initialised gate?
            trained = measure_sensitivity(ctx, steps=SUSPICION_STEPS) if fusion_silent(sens) else None
        out += run_check("checks.conditioning.judge_sensitivity", judge_sensitivity, sens, out, trained)
        ctx.metrics["conditioning.sensitivity"] = {
            "kind": "bars", "title": "Logit change when the caption is replaced (relative to logit spread)",
            "values": {k: v for k, v in sens.logits_change.items() if math.isfinite(v)},
            "x_label": "mean |Δ logits| / std", "logx": False}
    else:
        sens = None
        out += _need(ctx, "with_captions", "checks.conditioning (fusion, guidance)")

    if "condition_parameters" in caps:
        ctx.say("conditioning: gradient reach")
        with ctx.timed("conditioning.grads"):
            grads = measure_condition_grads(ctx)
        out += run_check("checks.conditioning.judge_condition_grads", judge_condition_grads, grads, out)
    else:
        out += _need(ctx, "condition_parameters", "checks.conditioning.judge_condition_grads")

    if "generate" not in caps:
        return out + _need(ctx, "generate", "checks.conditioning.judge_guidance")
    if caption_sensitive(sens):
        ctx.say("conditioning: guidance at generation")
        with ctx.timed("conditioning.guidance"):
            probe = measure_guidance(ctx)
        out += run_check("checks.conditioning.judge_guidance", judge_guidance, probe, sens)
    return out


def _no_caption(ctx: Context) -> Finding:
    return make("pipeline.capability_missing", "info", None,
                "the conditioning family did not run: the step taps no `caption` stage", "checks.conditioning",
                hint="tap('caption', captions) in the step (and condition.dropped/tokens/mask/embedding after it)")
