"""Judge gradient reach and parameter updates: is the optimisation path connected?"""

from __future__ import annotations

from dataclasses import dataclass

from ...findings import Finding
from ...records.optimisation import GradientMeasurement, GraphBreak, ParamGrad, UpdateMeasurement
from ..base import Rule, make
from .frozen import codec_parameters, codec_trained, frozen_findings, modules_of

__all__ = ["judge_gradients", "judge_update", "GRADIENT_RULES", "GradientStep", "codec_parameters"]

CHECK = "checks.gradients"


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
                f"{', '.join(modules_of(lost))} get no gradient", CHECK,
                hint=f"remove the {brk.kind} at {brk.location} (keep the tensor in the graph, or compute the "
                     "non-differentiable part from a detached copy only where it is not trained)",
                op=brk.op, kind=brk.kind, location=brk.location, parameters=[q.name for q in lost][:20], values=n)


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
    return frozen_findings(s.r, s.frozen)


def _codec_left_trainable(s: GradientStep) -> list[Finding]:
    return codec_trained(s.r)


def _not_in_optimizer(s: GradientStep) -> list[Finding]:
    missing_opt = [q for q in s.trainable if not q.in_optimizer]
    if not missing_opt:
        return []
    return [make("optim.param_not_in_optimizer", "error", "optimizer",
                 f"{len(missing_opt)} trainable parameters ({sum(q.numel for q in missing_opt):,} values) in "
                 f"{', '.join(modules_of(missing_opt))} are in no optimizer group", CHECK,
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
                 f"{len(cut)} parameters in {', '.join(modules_of(cut))} run in the forward pass but receive "
                 "no gradient", CHECK, hint="their output does not reach the loss; follow it forward",
                 parameters=[q.name for q in cut][:20])]


def _never_used(s: GradientStep) -> list[Finding]:
    unused = [q for q in s.trainable if q.grad == "none" and not q.used]
    if not unused:
        return []
    return [make("grad.missing", "warning", "grad",
                 f"{len(unused)} trainable parameters in {', '.join(modules_of(unused))} are never used in the "
                 "forward pass", CHECK, hint="dead modules: remove them, or wire them in if they should work",
                 parameters=[q.name for q in unused][:20])]


def _zero_by_init(s: GradientStep, zero: list[ParamGrad]) -> tuple[list[ParamGrad], list[Finding]]:
    """Zero gradients that the zero initialisation of a product's other factor explains: with that
    factor non-zero they get gradients (measured), and the factor itself gets a gradient and is in
    the optimizer, so the first update moves it off zero. Returns (the rest, an info)."""
    by_name = {q.name: q for q in s.r.params}

    def moves(n: str) -> bool:
        q = by_name.get(n)
        return q is not None and q.requires_grad and q.in_optimizer and q.grad == "ok"

    explained = [q for q in zero if s.r.zero_partners.get(q.name) and all(moves(n) for n in s.r.zero_partners[q.name])]
    if not explained:
        return zero, []
    partners = sorted({n for q in explained for n in s.r.zero_partners[q.name]})
    share = sum(q.numel for q in explained) / max(sum(q.numel for q in s.trainable), 1)
    first = explained[0]
    info = make("grad.zero", "info", "grad",
                f"{len(explained)} parameters ({100 * share:.1f}% of trainable values) in "
                f"{', '.join(modules_of(explained))} get an exactly zero gradient at the first step because a factor "
                f"they multiply is all zero (e.g. {first.name} beside {s.r.zero_partners[first.name][0]}): with the "
                f"{len(partners)} all-zero tensors set to small random values they get gradients, and those tensors "
                "get gradients themselves, so the first update moves them off zero. A zero-initialised factor of a "
                "product (y = B·A·x with B = 0 gives dL/dA = 0), as LoRA initialises B", CHECK,
                hint="nothing to do: it is the first step of a zero-initialised product; the gradients arrive from "
                     "the second update on",
                parameters=[q.name for q in explained][:20], partners=partners[:20], share=share)
    keep = {id(q) for q in explained}
    return [q for q in zero if id(q) not in keep], [info]


def _zero_by_dropout(s: GradientStep, zero: list[ParamGrad]) -> tuple[list[ParamGrad], list[Finding]]:
    """Zero gradients on the condition path of a batch whose every condition was dropped (classifier-
    free guidance): the encoder's output is not read on this batch, by design. The condition path is
    what the pipeline names (`condition_parameters`) and the modules that ran between the caption
    and the `condition.embedding` taps. Returns (the rest, an info)."""
    r = s.r
    dropped = r.condition_dropped
    if not dropped or not all(dropped) or (r.condition_rate is not None and r.condition_rate >= 1):
        return zero, []
    order = r.stage_order
    lo = min((order[k] for k in ("caption", "condition.dropped", "condition.tokens") if k in order), default=None)
    hi = order.get("condition.embedding")
    named = set(r.condition_params)

    def on_path(q: ParamGrad) -> bool:
        return q.name in named or (lo is not None and hi is not None and q.used and lo <= q.first_forward
                                   and 0 <= q.last_forward < hi)

    explained = [q for q in zero if on_path(q)]
    if not explained:
        return zero, []
    n, rate = len(dropped), r.condition_rate
    odds = (f" (at rate {rate:g} with a batch of {n}, about one update in {1 / rate ** n:,.0f})"
            if rate is not None and 0 < rate < 1 else "")
    share = sum(q.numel for q in explained) / max(sum(q.numel for q in s.trainable), 1)
    info = make("grad.zero", "info", "grad",
                f"{len(explained)} parameters ({100 * share:.1f}% of trainable values) of the condition path "
                f"({', '.join(modules_of(explained))}) get an exactly zero gradient on this batch because condition "
                f"dropout dropped all {n} of its captions{odds}: the encoder's output is not read, by design "
                "(classifier-free guidance)", CHECK,
                hint="nothing to do: batches that keep a caption reach these parameters; the conditioning family "
                     "judges the dropout rate over several batches",
                parameters=[q.name for q in explained][:20], dropped=n, rate=rate, share=share)
    keep = {id(q) for q in explained}
    return [q for q in zero if id(q) not in keep], [info]


def _exactly_zero(s: GradientStep) -> list[Finding]:
    zero = [q for q in s.trainable if q.grad == "zero"]
    if not zero or s.empty_mask:
        return []
    zero, out = _zero_by_init(s, zero)
    zero, more = _zero_by_dropout(s, zero)
    out += more
    if not zero:
        return out
    share = sum(q.numel for q in zero) / max(sum(q.numel for q in s.trainable), 1)
    return out + [make("grad.zero", "error" if share > 0.5 else "warning", "grad",
                 f"{len(zero)} parameters ({100 * share:.1f}% of trainable values) in {', '.join(modules_of(zero))} "
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
