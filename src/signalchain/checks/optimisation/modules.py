"""The trainable share of each top-level module: a module frozen whole is a design (a codec, a frozen
text encoder); a module frozen all but a sliver is rarely one.

Read from the parameters alone (no forward order needed), so it judges a live run's first step as
well as `doctor`'s measured one. The top-level modules are the children of the innermost module
holding every parameter (wrappers such as peft's `base_model.model` or a LightningModule's
`self.model` are looked through); no module name is read for the verdict.
"""

from __future__ import annotations

from collections import defaultdict

from ...findings import Finding
from ...records.optimisation import GradientMeasurement, ParamGrad
from ..base import make
from .adapters import adapter_pairs
from .frozen import ADAPTER_SHARE, FROZEN_SHARE
from .gradients import GradientStep, _all_frozen, _not_in_optimizer

__all__ = ["top_modules", "judge_module_shares", "judge_parameters"]

CHECK = "checks.gradients"


def top_modules(params: list[ParamGrad]) -> tuple[str, dict[str, list[ParamGrad]]]:
    """(the wrapper path looked through, {top-level module: its parameters})."""
    paths = [q.name.split(".") for q in params]
    root: list[str] = []
    while paths and all(len(p) > len(root) + 1 for p in paths) and len({p[len(root)] for p in paths}) == 1:
        root.append(paths[0][len(root)])
    groups: dict[str, list[ParamGrad]] = defaultdict(list)
    for q, p in zip(params, paths):
        groups[p[len(root)] if len(p) > len(root) + 1 else "<root>"].append(q)
    return ".".join(root), dict(groups)


def _values(qs: list[ParamGrad], trainable: bool | None = None) -> int:
    return sum(q.numel for q in qs if trainable is None or q.requires_grad == trainable)


def judge_module_shares(params: list[ParamGrad], lm: str | None = None) -> list[Finding]:
    """Per top-level module: wholly frozen (info, by design), frozen but adapted by low-rank pairs
    (info, parameter-efficient fine-tuning), or more than `FROZEN_SHARE` frozen and neither (warning:
    what trains is a sliver of a module that otherwise learns nothing). `lm`: the dotted name of the
    module that makes the logits, where the caller knows it (an HF MusicGen's decoder): frozen whole
    while other modules train, it is a warning, not a design."""
    if not any(q.requires_grad for q in params):
        return []  # nothing trainable at all: the gradients judge says so (error)
    root, groups = top_modules(params)
    where = f" (inside {root})" if root else ""
    frozen_whole = {m: qs for m, qs in groups.items() if not any(q.requires_grad for q in qs)}
    whole = set(frozen_whole)
    out: list[Finding] = []
    lm_top = next((m for m in frozen_whole if lm is not None and lm == (f"{root}.{m}" if root else m)), None)
    if lm_top is not None:
        qs = frozen_whole.pop(lm_top)
        trains = [m for m, g in groups.items() if any(q.requires_grad for q in g)]
        out.append(make("optim.param_frozen", "warning", "model",
                        f"{lm_top}{where}, the module that makes the logits, is frozen whole ({_values(qs):,} values); "
                        f"only {', '.join(trains)} train", CHECK,
                        hint=f"find the requires_grad_(False) (or freeze helper) applied to {lm_top}: the model's "
                             "predictions can only change through what feeds it", role="lm_frozen", module=lm_top,
                        root=root, values=_values(qs), trainable_modules=trains))
    if frozen_whole:
        named = ", ".join(f"{m} ({_values(qs):,} values)" for m, qs in frozen_whole.items())
        out.append(make("optim.param_frozen", "info", "model",
                        f"{len(frozen_whole)} top-level module(s){where} are frozen whole: {named}; by design for a "
                        "codec, a text encoder or the base an adapter fine-tunes", CHECK,
                        hint="nothing to do if these modules are meant to stay fixed",
                        role="frozen_modules", modules=sorted(frozen_whole), root=root,
                        values={m: _values(qs) for m, qs in frozen_whole.items()}))
    pairs = adapter_pairs(params)
    for m, qs in groups.items():
        if m in whole:
            continue
        frozen = [q for q in qs if not q.requires_grad]
        if not frozen:
            continue
        total, trained = _values(qs), _values(qs, True)
        share = trained / (total or 1)
        mine = [p for p in pairs if p.base in frozen]
        held = sum(p.values for p in mine)
        ev = dict(module=m, root=root, trainable_values=trained, values=total, trainable_share=share,
                  frozen_tensors=len(frozen), trainable=[q.name for q in qs if q.requires_grad][:20])
        if mine and held >= ADAPTER_SHARE * trained:
            out.append(make("optim.param_frozen", "info", "model",
                            f"{m}{where}: {100 * (1 - share):.1f}% of its {total:,} values are frozen, by design: "
                            f"its trained values are {len(mine)} low-rank pairs adapting frozen weights (e.g. "
                            f"{mine[0].b.name} · {mine[0].a.name} adapting {mine[0].base.name}), LoRA-style", CHECK,
                            hint="nothing to do if adapters are what you meant to train", role="adapters",
                            pairs=len(mine), **ev))
        elif 1 - share > FROZEN_SHARE:
            kept = [q for q in qs if q.requires_grad]
            out.append(make("optim.param_frozen", "warning", "model",
                            f"{m}{where} is frozen except {100 * share:.1f}% of its values ({trained:,} of {total:,}, "
                            f"in {len(kept)} tensors such as {', '.join(q.name for q in kept[:3])}): the rest of "
                            "the module learns nothing, and no low-rank adapters explain it", CHECK,
                            hint=f"if {m} should learn, find the requires_grad_(False) (or a freeze helper) applied to "
                                 "it; if only these tensors should train (bias-only or head-only fine-tuning), "
                                 "nothing to do", role="partly_frozen", **ev))
    return out


def judge_parameters(r: GradientMeasurement, lm: str | None = None) -> list[Finding]:
    """What the parameters alone say, before any gradient is read: every one frozen (error),
    trainable ones in no optimizer group (error), and each top-level module's trainable share
    (`lm`: see `judge_module_shares`)."""
    s = GradientStep.of(r)
    frozen = _all_frozen(s)
    if frozen:
        return frozen
    return _not_in_optimizer(s) + judge_module_shares(r.params, lm)
