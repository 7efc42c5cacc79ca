"""Judge gradient reach and parameter updates: is the optimisation path connected?"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ...findings import Finding
from ...records.optimisation import GradientMeasurement, GraphBreak, ParamGrad, UpdateMeasurement
from ..base import Rule, make

__all__ = ["judge_gradients", "judge_update", "GRADIENT_RULES", "GradientStep", "codec_parameters"]

CHECK = "checks.gradients"
#: Above this share of the model (the codec and parameters that never run not counted) frozen is a
#: warning: a judgement about intent (most of a model frozen is rarely meant), not a measurement.
FROZEN_SHARE = 0.5


def _modules(params: list[ParamGrad], limit: int = 6) -> list[str]:
    """The modules these parameters belong to, largest first."""
    size: dict[str, int] = defaultdict(int)
    for q in params:
        size[q.module or "<root>"] += q.numel
    return [m for m, _ in sorted(size.items(), key=lambda kv: -kv[1])][:limit]


def _break_finding(brk: GraphBreak, lost: list[ParamGrad], fallback_stage: str) -> Finding:
    fid = "dtype.path_broken" if brk.kind in ("integer cast", "numpy round trip", "leaves torch") else "grad.detached"
    n = sum(q.numel for q in lost)
    what = {
        "detach": f"`.{brk.op}()` detaches it",
        "no_grad": f"`{brk.op}` runs under torch.no_grad()",
        "integer cast": f"`.{brk.op}()` casts it to an integer dtype",
        "numpy round trip": "it goes through numpy and back",
        "leaves torch": f"`.{brk.op}()` takes it out of torch",
    }[brk.kind]
    return make(fid, "error", brk.stage or "grad",
                f"the gradient path is cut at {brk.location}: {what}; {len(lost)} parameters ({n:,} values) in "
                f"{', '.join(_modules(lost))} get no gradient", CHECK,
                hint=f"remove the {brk.kind} at {brk.location} (keep the tensor in the graph, or compute the "
                     "non-differentiable part from a detached copy only where it is not trained)",
                op=brk.op, kind=brk.kind, location=brk.location, parameters=[q.name for q in lost][:20], values=n)


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


def _codec_trained(r: GradientMeasurement) -> list[Finding]:
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
                 f"{len(codec)} trainable parameters ({n:,} values in {', '.join(_modules(codec, 3))}) run only while "
                 f"the audio becomes tokens and get no gradient from the loss"
                 + (f"; {len(stepped)} of them are in the optimizer, so weight decay and momentum move them and the "
                    "targets drift" if stepped else ""), CHECK,
                 hint="freeze the codec (model.freeze_audio_encoder(), requires_grad_(False)) and keep it out of the "
                      "optimizer: it only makes the labels", parameters=[q.name for q in codec][:20],
                 in_optimizer=len(stepped))]


def _frozen(r: GradientMeasurement, frozen: list[ParamGrad]) -> list[Finding]:
    """The codec frozen is the normal case (info); the share of the rest that is frozen is judged."""
    if not frozen:
        return []
    codec, idle = codec_parameters(r)
    out: list[Finding] = []
    if codec:
        n = sum(q.numel for q in codec)
        out.append(make("optim.param_frozen", "info", "model",
                        f"the codec ({len(codec)} tensors, {n:,} values in {', '.join(_modules(codec, 3))}) is frozen, "
                        "as usual: its parameters run only while the audio becomes tokens (before the `tokens` tap)"
                        + (f"; {sum(q.numel for q in idle):,} other frozen values ({', '.join(_modules(idle, 2))}…) "
                           "never run in the step" if idle else ""),
                        CHECK, hint="nothing to do: the codec only makes the targets", role="codec", values=n,
                        modules=_modules(codec, 20)))
    skip = {id(q) for q in codec} | {id(q) for q in idle}
    rest = [q for q in r.params if id(q) not in skip]
    rest_frozen = [q for q in rest if not q.requires_grad]
    if not rest_frozen:
        return out
    share = sum(q.numel for q in rest_frozen) / (sum(q.numel for q in rest) or 1)
    sev = "warning" if share > FROZEN_SHARE else "info"
    note = (f"; the codec and {sum(q.numel for q in idle):,} frozen values that never run in the step are not counted"
            if codec or idle else "")
    out.append(make("optim.param_frozen", sev, "model",
                    f"{100 * share:.0f}% of the model's parameter values are frozen ({len(rest_frozen)} tensors in "
                    f"{', '.join(_modules(rest_frozen))}){note}", CHECK,
                    hint="intended for a frozen text encoder; otherwise remove the requires_grad_(False)",
                    share=share, modules=_modules(rest_frozen, 20), codec_values=sum(q.numel for q in codec),
                    idle_values=sum(q.numel for q in idle)))
    return out


@dataclass(frozen=True)
class GradientStep:
    """What every gradient rule reads: the measurement, its trainable and frozen parameters, and
    whether an empty loss mask (already found) explains zero gradients downstream."""

    r: GradientMeasurement
    trainable: list[ParamGrad]
    frozen: list[ParamGrad]
    empty_mask: bool

    @classmethod
    def of(cls, r: GradientMeasurement, prior: list[Finding] | None = None) -> GradientStep:
        return cls(r, trainable=[q for q in r.params if q.requires_grad],
                   frozen=[q for q in r.params if not q.requires_grad],
                   empty_mask=any(f.id == "mask.empty" and f.severity.value == "error" for f in prior or []))


def _all_frozen(s: GradientStep) -> list[Finding]:
    if s.trainable:
        return []
    return [make("optim.param_frozen", "error", "model", f"all {len(s.r.params)} parameters have requires_grad=False",
                 CHECK, hint="nothing can learn: find where requires_grad_(False) or a freeze helper is applied",
                 parameters=len(s.r.params))]


def _frozen_share(s: GradientStep) -> list[Finding]:
    return _frozen(s.r, s.frozen)


def _codec_left_trainable(s: GradientStep) -> list[Finding]:
    return _codec_trained(s.r)


def _not_in_optimizer(s: GradientStep) -> list[Finding]:
    missing_opt = [q for q in s.trainable if not q.in_optimizer]
    if not missing_opt:
        return []
    return [make("optim.param_not_in_optimizer", "error", "optimizer",
                 f"{len(missing_opt)} trainable parameters ({sum(q.numel for q in missing_opt):,} values) in "
                 f"{', '.join(_modules(missing_opt))} are in no optimizer group", CHECK,
                 hint="build the optimizer from model.parameters() after the model is final (moved, replaced, "
                      "wrapped); check every parameter group", parameters=[q.name for q in missing_opt][:20])]


def _made_leaf(r: GradientMeasurement) -> bool:
    """A loss without autograd history that requires grad: made a leaf by hand."""
    return not r.loss_requires_grad and r.loss_is_tensor and bool(r.stage_requires_grad.get("loss"))


def _loss_made_leaf(s: GradientStep) -> list[Finding]:
    # A leaf that requires grad was made so by hand: whatever cut the graph (a logged break says
    # where), the requires_grad_() is what hides it.
    r = s.r
    if not _made_leaf(r):
        return []
    leaf = make("loss.independent_of_output", "error", "loss",
                "the loss requires grad but has no autograd history: it was made a leaf by hand "
                "(requires_grad_()) instead of being computed from the model's outputs"
                + (f"; the graph was lost at {r.breaks[0].location}" if r.breaks else ""), CHECK,
                hint="a requires_grad_() or torch.tensor(loss_value, requires_grad=True) hides that the "
                     "loss is not computed from the logits; find which tensor the loss is built from")
    cut = [_break_finding(r.breaks[0], s.trainable, "loss")] if r.breaks else []
    return [leaf] + cut


def _loss_without_graph(s: GradientStep) -> list[Finding]:
    """The first model stage that lost its graph is where the cut shows; a logged break names the op."""
    r = s.r
    if r.loss_requires_grad or _made_leaf(r):
        return []
    graph = [n for n, g in r.stage_requires_grad.items() if g]
    lost = next((n for n in ("condition.embedding", "logits", "loss") if r.stage_requires_grad.get(n) is False), "loss")
    brk = next((b for b in r.breaks if b.stage == lost), r.breaks[0] if r.breaks else None)
    if brk is not None:
        return [_break_finding(brk, s.trainable, lost)]
    fid = "grad.detached" if lost != "loss" or graph else "loss.independent_of_output"
    return [
        make(
            fid,
            "error",
            lost,
            f"the loss has no autograd graph ({'not a tensor' if not r.loss_is_tensor else 'requires_grad is False'}); "
            f"the first model stage without a graph is {lost!r}",
            CHECK,
            hint="the loss must be computed from the model's outputs inside the graph; look for "
            "detach(), .item(), torch.no_grad() or a loss rebuilt from plain numbers",
            stage_requires_grad=r.stage_requires_grad,
        )
    ]


def _logits_do_not_reach_loss(s: GradientStep) -> list[Finding]:
    r = s.r
    if not r.loss_requires_grad or r.loss_depends_on_logits is not False or s.empty_mask:
        return []  # an empty loss mask zeroes every gradient; mask.empty already says so
    what = {"graph": " (nor to the op that produced them, whichever view of them the loss took)",
            "detached": " (nor to the module output the returned, detached logits were copied from)"}
    return [make("loss.independent_of_output", "error", "loss",
                 "the loss has a graph but no non-zero gradient reaches the logits"
                 f"{what.get(r.depends_via or '', '')}: the model's output does not influence the loss", CHECK,
                 hint="check which tensor goes into the loss (targets twice, a one-hot, a detached copy, a "
                      "requires_grad_() added to silence an error)", via=r.depends_via)]


def _used_without_gradient(s: GradientStep) -> list[Finding]:
    """Parameters that run in the forward pass but get no gradient: cut by the first logged break
    after their last use (any logged break otherwise), else unexplained."""
    cut = [q for q in s.trainable if q.grad == "none" and q.used]
    if not cut:
        return []
    last = max(q.last_forward for q in cut)
    after = [b for b in s.r.breaks if b.order > last] or s.r.breaks
    if after:
        return [_break_finding(after[0], cut, "grad")]
    return [make("grad.missing", "error", "grad",
                 f"{len(cut)} parameters in {', '.join(_modules(cut))} run in the forward pass but receive "
                 "no gradient", CHECK, hint="their output does not reach the loss; follow it forward",
                 parameters=[q.name for q in cut][:20])]


def _never_used(s: GradientStep) -> list[Finding]:
    unused = [q for q in s.trainable if q.grad == "none" and not q.used]
    if not unused:
        return []
    return [make("grad.missing", "warning", "grad",
                 f"{len(unused)} trainable parameters in {', '.join(_modules(unused))} are never used in the "
                 "forward pass", CHECK, hint="dead modules: remove them, or wire them in if they should work",
                 parameters=[q.name for q in unused][:20])]


def _exactly_zero(s: GradientStep) -> list[Finding]:
    zero = [q for q in s.trainable if q.grad == "zero"]
    if not zero or s.empty_mask:
        return []
    share = sum(q.numel for q in zero) / max(sum(q.numel for q in s.trainable), 1)
    return [make("grad.zero", "error" if share > 0.5 else "warning", "grad",
                 f"{len(zero)} parameters ({100 * share:.1f}% of trainable values) in {', '.join(_modules(zero))} "
                 "get a gradient that is exactly zero", CHECK,
                 hint="a multiplication by zero, a rounding op, or a saturated activation stops the signal",
                 parameters=[q.name for q in zero][:20], share=share)]


_BREAK_IDS = ("grad.detached", "dtype.path_broken")
#: The rules in the order the judge runs them; a final rule that fires ends the judging (without a
#: trainable parameter, or without a loss graph, nothing downstream can be judged).
GRADIENT_RULES: tuple[Rule, ...] = (
    Rule(("optim.param_frozen",), _all_frozen, final=True),
    Rule(("optim.param_frozen",), _frozen_share),
    Rule(("codec.trained",), _codec_left_trainable),
    Rule(("optim.param_not_in_optimizer",), _not_in_optimizer),
    Rule(("loss.independent_of_output", *_BREAK_IDS), _loss_made_leaf, final=True),
    Rule((*_BREAK_IDS, "loss.independent_of_output"), _loss_without_graph, final=True),
    Rule(("loss.independent_of_output",), _logits_do_not_reach_loss),
    Rule((*_BREAK_IDS, "grad.missing"), _used_without_gradient),
    Rule(("grad.missing",), _never_used),
    Rule(("grad.zero",), _exactly_zero),
)


def judge_gradients(r: GradientMeasurement, prior: list[Finding] | None = None) -> list[Finding]:
    """`prior`: findings already made; an empty loss mask explains zero gradients downstream."""
    step = GradientStep.of(r, prior)
    out: list[Finding] = []
    for rule in GRADIENT_RULES:
        found = rule.fn(step)
        out += found
        if found and rule.final:
            break
    return out


def judge_update(u: UpdateMeasurement, trainable: set[str] | None = None) -> list[Finding]:
    """After a few updates every trainable parameter that had a gradient should have moved."""
    moved = {n: c for n, c in u.changed.items() if c > 0}
    names = trainable if trainable is not None else set(u.changed)
    considered = [n for n in names if n in u.changed]
    if not considered:
        return []
    if u.at_step and not moved and all(s["with_grad"] == 0 for s in u.at_step):
        return [make("grad.missing", "error", "grad",
                     f"optimizer.step() ran {len(u.at_step)} times but saw no gradient on any of its "
                     f"{u.at_step[0]['params']} parameters: they are cleared (or never kept) between backward and step",
                     CHECK, hint="call zero_grad() before backward (or after step), never between them; check hooks "
                                 "or wrappers that reset .grad", steps=len(u.at_step),
                     params_with_grad_in_backward=sum(u.had_grad.values()))]
    # A tensor whose every measured update was 0 or lost to rounding did not move because of its rate
    # (a zero schedule, a warm-up's first tiny steps): the rate judge (`rates.judge_rates`) says so.
    by_rate = set(u.below_resolution)
    if not moved and any(u.had_grad.values()) and all(n in by_rate for n, g in u.had_grad.items() if g):
        return []
    if not moved:
        grads = sum(u.had_grad.values())
        return [
            make(
                "optim.step_skipped",
                "error",
                "optimizer",
                f"no parameter changed after {u.steps} updates ({grads} of {len(u.had_grad)} had a gradient)",
                CHECK,
                hint="optimizer.step() is never reached or has no effect: look for a skipped step (gradient "
                "accumulation, a scaler that sees inf every step, zero_grad before step, lr 0)",
                steps=u.steps,
                params_with_grad=grads,
                scales=u.scaler_scales,
            )
        ]
    stuck = [n for n in considered if u.changed.get(n, 0) == 0 and u.had_grad.get(n, False) and n not in by_rate]
    out: list[Finding] = []
    if stuck:
        out.append(make("optim.step_skipped", "warning", "optimizer",
                        f"{len(stuck)} parameters had gradients but did not move in {u.steps} updates", CHECK,
                        hint="their group's learning rate is 0, or they are missing from the optimizer",
                        parameters=stuck[:20]))
    return out
