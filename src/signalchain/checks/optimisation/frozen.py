"""Frozen parameters judged by what they are: the codec (it only makes the targets), the adapters'
frozen base (parameter-efficient fine-tuning), or a share of the model frozen by mistake."""

from __future__ import annotations

from collections import defaultdict

from ...findings import Finding
from ...records.optimisation import GradientMeasurement, ParamGrad
from ..base import make
from .adapters import adapter_pairs

__all__ = ["codec_parameters", "codec_trained", "frozen_findings", "modules_of", "FROZEN_SHARE", "ADAPTER_SHARE"]

CHECK = "checks.gradients"

#: Above this share of the model (the codec and parameters that never run not counted) frozen is a
#: warning: a judgement about intent (most of a model frozen is rarely meant), not a measurement.
FROZEN_SHARE = 0.5
#: Low-rank pairs adapting frozen weights hold at least this share of the trained values: the frozen
#: base is parameter-efficient fine-tuning's design.
ADAPTER_SHARE = 0.5


def modules_of(params: list[ParamGrad], limit: int = 6) -> list[str]:
    """The modules these parameters belong to, largest first."""
    size: dict[str, int] = defaultdict(int)
    for q in params:
        size[q.module or "<root>"] += q.numel
    return [m for m, _ in sorted(size.items(), key=lambda kv: -kv[1])][:limit]


def _root(modules: list[str]) -> str:
    """The innermost module that contains all of these (dotted names); "" for the model itself."""
    parts = [m.split(".") for m in modules if m]
    if not parts:
        return ""
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)


def _under(q: ParamGrad, module: str) -> bool:
    return q.module == module or q.module.startswith(module + ".")


def codec_parameters(r: GradientMeasurement) -> tuple[list[ParamGrad], list[ParamGrad]]:
    """(the frozen codec's parameters, other frozen parameters never used in the step), by observation.

    The codec is what turns audio into tokens: frozen parameters whose modules ran in the step, and
    only before the `tokens` tap. Its module is the innermost one holding all of them, widened while
    the enclosing module (below the model itself) holds only frozen parameters none of which ran
    after that tap: a decoder half that only runs at generation belongs to the codec too. No name
    is read.
    """
    tokens = r.stage_order.get("tokens")
    frozen = [q for q in r.params if not q.requires_grad]
    if tokens is None:
        return [], [q for q in frozen if not q.used]
    codec = [q for q in frozen if q.used and 0 <= q.last_forward < tokens]
    root = _root([q.module for q in codec])
    while codec and "." in root:
        parent = root.rsplit(".", 1)[0]
        inside = [q for q in r.params if _under(q, parent)]
        if any(q.requires_grad or (q.used and q.last_forward >= tokens) for q in inside):
            break
        root = parent
    if codec and root:
        taken = {id(q) for q in codec}
        codec += [q for q in frozen if not q.used and _under(q, root) and id(q) not in taken]
    taken = {id(q) for q in codec}
    return codec, [q for q in frozen if not q.used and id(q) not in taken]


def codec_trained(r: GradientMeasurement) -> list[Finding]:
    """Trainable parameters that run only while the audio becomes tokens (before the `tokens` tap)
    and get no gradient from the loss: a codec left trainable. In an optimizer, weight decay or
    momentum still moves them, so the tokens (the targets) drift under the model."""
    tokens = r.stage_order.get("tokens")
    if tokens is None:
        return []
    codec = [q for q in r.params if q.requires_grad and q.used and 0 <= q.last_forward < tokens and q.grad != "ok"]
    if not codec:
        return []
    stepped = [q for q in codec if q.in_optimizer]
    n = sum(q.numel for q in codec)
    return [make("codec.trained", "error" if stepped else "warning", "model",
                 f"{len(codec)} trainable parameters ({n:,} values in {', '.join(modules_of(codec, 3))}) run only "
                 f"while the audio becomes tokens and get no gradient from the loss"
                 + (f"; {len(stepped)} of them are in the optimizer, so weight decay and momentum move them and the "
                    "targets drift" if stepped else ""), CHECK,
                 hint="freeze the codec (model.freeze_audio_encoder(), requires_grad_(False)) and keep it out of the "
                      "optimizer: it only makes the labels", parameters=[q.name for q in codec][:20],
                 in_optimizer=len(stepped))]


def frozen_findings(r: GradientMeasurement, frozen: list[ParamGrad]) -> list[Finding]:
    """The codec frozen is the normal case (info); the share of the rest that is frozen is judged."""
    if not frozen:
        return []
    codec, idle = codec_parameters(r)
    out: list[Finding] = []
    if codec:
        n = sum(q.numel for q in codec)
        out.append(make("optim.param_frozen", "info", "model",
                        f"the codec ({len(codec)} tensors, {n:,} values in {', '.join(modules_of(codec, 3))}) is "
                        "frozen, as usual: its parameters run only while the audio becomes tokens (before the "
                        "`tokens` tap)"
                        + (f"; {sum(q.numel for q in idle):,} other frozen values ({', '.join(modules_of(idle, 2))}…) "
                           "never run in the step" if idle else ""),
                        CHECK, hint="nothing to do: the codec only makes the targets", role="codec", values=n,
                        modules=modules_of(codec, 20)))
    skip = {id(q) for q in codec} | {id(q) for q in idle}
    rest = [q for q in r.params if id(q) not in skip]
    rest_frozen = [q for q in rest if not q.requires_grad]
    if not rest_frozen:
        return out
    share = sum(q.numel for q in rest_frozen) / (sum(q.numel for q in rest) or 1)
    note = (f"; the codec and {sum(q.numel for q in idle):,} frozen values that never run in the step are not counted"
            if codec or idle else "")
    peft = _adapters(r, rest, rest_frozen, share, note)
    if peft:
        return out + peft
    sev = "warning" if share > FROZEN_SHARE else "info"
    out.append(make("optim.param_frozen", sev, "model",
                    f"{100 * share:.0f}% of the model's parameter values are frozen ({len(rest_frozen)} tensors in "
                    f"{', '.join(modules_of(rest_frozen))}){note}", CHECK,
                    hint="intended for a frozen text encoder; otherwise remove the requires_grad_(False)",
                    share=share, modules=modules_of(rest_frozen, 20), codec_values=sum(q.numel for q in codec),
                    idle_values=sum(q.numel for q in idle)))
    return out


def _adapters(r: GradientMeasurement, rest: list[ParamGrad], rest_frozen: list[ParamGrad], share: float,
              note: str) -> list[Finding]:
    """Most of the trained values are low-rank pairs adapting frozen weights: parameter-efficient
    fine-tuning, whose frozen base is the design (info)."""
    pairs = adapter_pairs(r.params)
    trained = sum(q.numel for q in rest if q.requires_grad)
    held = sum(p.values for p in pairs)
    if not pairs or held < ADAPTER_SHARE * trained:
        return []
    ranks = sorted({p.rank for p in pairs})
    named = sorted({seg for p in pairs for q in (p.a, p.b) for seg in q.name.split(".") if "lora" in seg.lower()})
    return [make("optim.param_frozen", "info", "model",
                 f"{100 * share:.0f}% of the model's parameter values are frozen, by design: the trained values are "
                 f"{len(pairs)} low-rank pairs (rank {', '.join(map(str, ranks))}; {held:,} of {trained:,} trained "
                 f"values) whose product has the shape of a frozen weight beside them, e.g. {pairs[0].b.name} · "
                 f"{pairs[0].a.name} adapting {pairs[0].base.name}: parameter-efficient fine-tuning (LoRA-style)"
                 + (f", named {'/'.join(named)}" if named else "") + note, CHECK,
                 hint="nothing to do if adapters are what you meant to train; the frozen base is then intended",
                 role="adapters", share=share, pairs=len(pairs), ranks=ranks, adapter_values=held,
                 trained_values=trained, adapted=[p.base.name for p in pairs][:20],
                 modules=modules_of(rest_frozen, 20))]
