"""The data family: batch, crop, tokens, masks, targets, what the model is fed, the loader, tokens
against their audio."""

from __future__ import annotations

from typing import Any

from ...checks.data import DATA_CHECKS
from ...checks.inputs import judge_target_leak
from ...checks.loader import judge_loader
from ...checks.symbolic import SYMBOLIC_CHECKS
from ...checks.token_audio import judge_token_audio
from ...checks.tokens import TOKEN_CHECKS
from ...findings import Finding
from ...records.figures import Figure, Text
from ...trace import Trace
from ..context import Context, Knob
from ..data import measure_loader, measure_token_audio
from ..doctor import SELF, Family, Step, judge, register
from ..inputs import measure_model_inputs
from .audio import golden_trace

__all__: list[str] = []

KNOBS = {"loader_batches": Knob(6, 8, 12, "loader batches read (data, optimisation, splits families)")}


def trace_problems(trace: Trace) -> list[Finding]:
    """What recording the golden step already found (a stage that could not be summarised…)."""
    return list(trace.problems)


def _loader(ctx: Context) -> Any:
    return measure_loader(ctx, ctx.fresh_model())


def _show_token_audio(ta: dict[str, Any]) -> dict[str, Figure]:
    own = [round(x, 2) for x in ta["own"]]
    return {"token_audio": Text("Tokens against their audio", (
        f"decoded tokens vs the audio they encode (log-mel correlation): own {own}, other examples "
        f"{ta['others_mean']:.2f}; best codebook order {ta['best_perm']} ({ta['best_perm_score']:.2f} vs "
        f"{ta['identity']:.2f} as given)"))}


register(Family("data", "Data path: batch, crop, tokens, masks, targets, loader, token/audio agreement",
                after=("audio",), knobs=KNOBS, steps=(
    Step("golden", measure=golden_trace, timing="", isolated=False,
         judges=(trace_problems, *DATA_CHECKS, *TOKEN_CHECKS, *SYMBOLIC_CHECKS)),
    Step("model_inputs", say="data: what the model is fed", measure=measure_model_inputs,
         judges=(judge(judge_target_leak, "data.golden", SELF),)),
    Step("token_audio", say="data: tokens against audio", measure=measure_token_audio,
         judges=(judge_token_audio,), show=_show_token_audio),
    Step("loader", needs=("loader",), needed_by="checks.stale.loader", say="data: loader", measure=_loader,
         judges=(judge_loader,)),
)))
