"""Judge non-finite values: the first one (op, module, stage, cause), the loss, the model and optimizer state.

A non-finite value counts when it matters: a non-finite loss or gradient, a parameter or moment
gone bad, a step that raised, or a tapped stage that holds one. Values a pipeline fills with NaN or
-inf on purpose are not news: a fill with a non-finite constant is never blamed, and non-finite
logits only where the loss mask is False are what AudioCraft does.
"""

from __future__ import annotations

import dataclasses
import math

from ..findings import Finding, Severity
from ..records.numerics import (
    LocateMeasurement,
    NumericsMeasurement,
    OpEvent,
    StageStatus,
    StateScan,
)
from .base import make
from .numerics_causes import CAUSES, likely_cause, op_name, stage_cause

__all__ = ["judge_numerics", "judge_locate", "judge_state"]

CHECK = "checks.numerics"


def _names(items: list[str], n: int = 4) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def judge_state(scan: StateScan | None, baseline: StateScan | None = None) -> list[Finding]:
    """Parameters, buffers, moments holding non-finite or absurd values (new since `baseline`)."""
    if scan is None:
        return []
    seen = {(i.name, i.problem) for i in baseline.issues} if baseline is not None else set()
    new = [i for i in scan.issues if (i.name, i.problem) not in seen]
    out: list[Finding] = []
    when = "before any update" if baseline is None else f"after {scan.updates} update(s), finite before them"
    for where, fid in (("model", "nonfinite.state"), ("optimizer", "nonfinite.optimizer_state")):
        mine = [i for i in new if (i.where == "optimizer") == (where == "optimizer")]
        for problem, severity in (("nonfinite", "error"), ("negative", "error"), ("huge", "warning")):
            hits = [i for i in mine if i.problem == problem]
            if not hits:
                continue
            # Bad weights before any update came with the model (a checkpoint); after updates the update wrote them.
            stage = "model" if (baseline is None and where == "model") else "optimizer"
            what = {"nonfinite": "non-finite values", "negative": "negative second moments (must be >= 0)",
                    "huge": "absurd magnitudes (|x| > 1e4)"}[problem]
            detail = "; ".join(f"{i.name}: {i.count} of {i.numel}" for i in hits[:4])
            kind = "optimizer moments" if where == "optimizer" else "parameters/buffers"
            hint = ("check the checkpoint or initialisation that produced them (torch.isfinite on load), and replay "
                    "the update that wrote them" if stage == "model" else
                    "the update wrote them: replay it under signalchain's locator (doctor --family numerics) and "
                    "check the optimizer's eps, the learning rate and gradient clipping")
            if where == "optimizer" and baseline is None:
                hint = (
                    "the optimizer state was resumed corrupted: drop it (reset the moments) "
                    "or load an earlier checkpoint"
                )
            out.append(make(fid, severity, stage, f"{len(hits)} {kind} hold {what} {when}: {detail}", CHECK,
                            hint=hint, tensors=[i.name for i in hits], counts=[i.count for i in hits],
                            abs_max=[i.abs_max for i in hits], updates=scan.updates))
    return out


def _scale_overflow(rep: LocateMeasurement) -> bool:
    """The gradients overflowed only because the loss was scaled (finite at scale 1): the scaler skips
    the step, which is the precision family's business, not a non-finite bug."""
    return rep.scaled and bool(rep.unscaled_grads_finite)


def _stages(rep: LocateMeasurement) -> list[StageStatus]:
    """Stages that count: those made from gradients do not when only the loss scale made them overflow."""
    return [s for s in rep.stages if s.phase == "forward" or not _scale_overflow(rep)]


def _serious(rep: LocateMeasurement) -> bool:
    """The step is broken: a non-finite loss, gradient or weight, or it raised."""
    grads = bool(rep.grads_nonfinite) and not _scale_overflow(rep)
    loss_bad = rep.loss is not None and not math.isfinite(rep.loss)
    return loss_bad or grads or bool(rep.params_nonfinite_after) or rep.error is not None


def _short(ev: OpEvent | None, st: StageStatus | None) -> str:
    if ev is not None:
        return f"{op_name(ev.op)}" + (f" in {ev.module}" if ev.module else "") + f" ({ev.phase}) at stage {ev.stage}"
    return f"stage {st.name}" if st is not None else "not found"


def _event_finding(ev: OpEvent, rep: LocateMeasurement) -> Finding:
    key, why, hint = likely_cause(ev)
    where = f"module {ev.module}" if ev.module else "outside any module"
    at = f" at {ev.location}" if ev.location else ""
    phase = {"forward": "in the forward pass", "backward": f"in the backward pass (gradient of {ev.forward_op})",
             "after backward": "after the backward pass", "optimizer": "in the optimizer step"}[ev.phase]
    evidence = dict(op=ev.op, module=ev.module, phase=ev.phase, cause=key, cause_text=CAUSES[key], dtype=ev.dtype,
                    shape=ev.shape, nan=ev.nan, inf=ev.inf, numel=ev.numel, inputs=ev.inputs, scalars=ev.scalars,
                    location=ev.location, forward_op=ev.forward_op, target=ev.target, fp32_finite=ev.fp32_finite)
    crash = f" The step then raised {rep.error}." if rep.error else ""
    if ev.phase == "optimizer":
        fid = "nonfinite.optimizer_state" if ev.kind == "state" and "[" in (ev.target or "") else "nonfinite.state"
        return make(fid, "error", "optimizer", f"the optimizer step made the first non-finite value: "
                    f"{op_name(ev.op)} on {ev.target} made {ev.nan} NaN / {ev.inf} inf. Likely cause: "
                    f"{CAUSES[key]} — {why}.", CHECK, hint=hint, **evidence)
    if ev.kind == "state":
        fid = "nonfinite.optimizer_state" if "[" in (ev.target or "") else "nonfinite.state"
        return make(fid, "error", "model" if fid == "nonfinite.state" else "optimizer",
                    f"{op_name(ev.op)} ({where}{at}) {phase} reads {ev.target}, which is already non-finite; it "
                    f"shows at stage {ev.stage}.{crash}", CHECK, hint=hint, **evidence)
    return make("nonfinite.first", "error", ev.stage,
                f"first non-finite value: {op_name(ev.op)} ({where}{at}) {phase} made {ev.nan} NaN and {ev.inf} inf "
                f"of {ev.numel} values in {ev.dtype}; it shows at stage {ev.stage}. Likely cause: {CAUSES[key]} — "
                f"{why}.{crash}", CHECK, hint=hint, **evidence)


def _input_finding(ev: OpEvent, rep: LocateMeasurement) -> Finding:
    """The batch held the non-finite values before any code ran, and they reach the loss or gradients."""
    x = ev.inputs[0] if ev.inputs else {}
    turned = next((e for e in rep.events if e.kind == "born" and e.order > ev.order and e.reached), None)
    via = (f"; the first op they make new non-finite values in is {op_name(turned.op)}"
           + (f" in {turned.module}" if turned.module else "") + f" ({turned.phase})") if turned else ""
    finite = f" (its finite values from {x['min']:.3g} to {x['max']:.3g})" if "min" in x else ""
    rows = f" in example(s) {x['examples']}" if x.get("examples") else ""
    crash = f" The step then raised {rep.error}." if rep.error else ""
    return make("nonfinite.input", "error", ev.stage,
                f"non-finite input: {ev.target} holds {ev.nan} NaN and {ev.inf} inf of {ev.numel} values{rows}{finite} "
                f"before any code ran, and they reach the {ev.reached or 'step'}{via}.{crash}", CHECK,
                hint=f"check {ev.target} with torch.isfinite where the batch is built (a corrupt file, a cached "
                     "feature or embedding written from a broken step), and drop or repair the example",
                cause="input", cause_text=CAUSES["input"], batch_key=ev.target, nan=ev.nan, inf=ev.inf,
                numel=ev.numel, inputs=ev.inputs, examples=x.get("examples", []), reached=ev.reached,
                turned_by=turned.op if turned else None,
                batch_paths=rep.batch_nonfinite, error=rep.error)


def _benign(rep: LocateMeasurement) -> list[Finding]:
    """Non-finite values that no later value carries to the loss or the gradients: context, once per site."""
    out: list[Finding] = []
    seen = {(e.op, e.module, e.location or e.target) for e in rep.events if e.kind != "dead end"}
    for ev in rep.events:
        site = (ev.op, ev.module, ev.location or ev.target)
        if ev.kind != "dead end" or site in seen:
            continue
        seen.add(site)
        at = f" at {ev.location}" if ev.location else ""
        where = ev.target if ev.op == "batch" else f"{op_name(ev.op)}" + (f" in {ev.module}" if ev.module else "") + at
        out.append(make("nonfinite.benign", "info", ev.stage,
                        f"{where} made {ev.nan} NaN and {ev.inf} inf of {ev.numel} values that no later value carries "
                        "to the loss or the gradients (cast to integers, selected away or masked): not the cause",
                        CHECK, hint="nothing to fix here; the verdict is the non-finite value that reaches the loss",
                        op=ev.op, module=ev.module, location=ev.location, batch_key=ev.target if ev.op == "batch"
                        else None, nan=ev.nan, inf=ev.inf, numel=ev.numel))
    return out


def _stage_finding(st: StageStatus, rep: LocateMeasurement) -> Finding:
    floats = [s for s in rep.stages if s.kind == "float" and s.order < st.order]
    previous = floats[-1] if floats else None
    crash = f" The step then raised {rep.error}." if rep.error else ""
    ev = dict(nan=st.nan, inf=st.inf, numel=st.numel, examples=st.examples, all_bad_examples=st.all_bad_examples,
              previous=previous.name if previous else None, batch_paths=rep.batch_nonfinite, error=rep.error)
    # The first tap is the input when it is the decoded input audio (DESIGN §2, stage 1); another first
    # tap after a finite batch shows a value made by untapped code before it, not bad input.
    if previous is None and not rep.batch_nonfinite and st.name.split("#")[0] != "audio.original":
        return make("nonfinite.first", "error", st.name,
                    f"first non-finite value at stage {st.name}: {st.nan} NaN and {st.inf} inf of {st.numel} values "
                    f"(examples {st.examples}); the batch is finite and no stage is tapped before this one, so the "
                    f"code between the batch and this tap made them.{crash}", CHECK,
                    hint="tap the intermediate values before this stage (decode, resample, feature extraction) to "
                         "narrow it down", cause="unknown", cause_text=CAUSES["unknown"], **ev)
    if rep.batch_nonfinite or previous is None:
        src = f"the batch holds them before any code ran ({_names(rep.batch_nonfinite)})" if rep.batch_nonfinite \
            else "it is the input audio as decoded, the first stage tapped"
        return make("nonfinite.input", "error", st.name,
                    f"non-finite input: stage {st.name} holds {st.nan} NaN and {st.inf} inf of {st.numel} values "
                    f"(examples {st.examples}) and {src}.{crash}", CHECK,
                    hint="check the decoded audio / cached features with np.isfinite where they are loaded, and "
                         "drop or repair the file (a corrupt float WAV block decodes to NaN)", cause="input", **ev)
    key, why, hint = stage_cause(st, previous)
    counted = " at every position the loss counts" if previous.masked_out_only else ""
    return make("nonfinite.first", "error", st.name,
                f"first non-finite value at stage {st.name}: {st.nan} NaN and {st.inf} inf of {st.numel} values "
                f"(examples {st.examples}); {previous.name} is finite{counted}. Likely cause: {CAUSES[key]} — "
                f"{why}.{crash}",
                CHECK, hint=hint, cause=key, cause_text=CAUSES[key], **ev)


def judge_locate(rep: LocateMeasurement) -> list[Finding]:
    """The first non-finite value of a replayed step, and its non-finite loss."""
    stages = _stages(rep)
    shown = next((s for s in stages if s.bad), None)
    serious = _serious(rep)
    if not serious and shown is None:
        return []
    first = rep.first()
    if first is not None and first.kind == "input" and not first.reached and (
            rep.error or rep.first(("born", "state")) is not None):
        first = rep.first(("born", "state"))  # not seen reaching anything: the batch is a suspect, not the verdict
    if first is not None and first.phase != "forward" and _scale_overflow(rep):
        first = None  # the loss scale overflowed the gradients: the scaler's business (precision family)
    out: list[Finding] = []
    if first is not None and first.kind == "input":
        out.append(_input_finding(first, rep))
        origin = f"{first.target} in the batch"
    elif first is not None and (shown is None or first.order < shown.order):
        out.append(_event_finding(first, rep))
        origin = _short(first, None)
    elif shown is not None:
        out.append(_stage_finding(shown, rep))
        origin = _short(None, shown)
    else:
        return []
    if not serious:  # a non-finite stage, but the loss and the gradients are finite
        out = [
            dataclasses.replace(
                f,
                severity=Severity.WARNING,
                message=f.message + " The loss and the gradients are still finite.",
                hint=f.hint + "; a value a mask hides today breaks the gradient tomorrow (0·NaN = NaN)",
            )
            for f in out
        ]
    if rep.loss is not None and not math.isfinite(rep.loss):
        out.append(make("nonfinite.loss", "error", rep.loss_stage or "loss",
                        f"the loss is {rep.loss}. The first non-finite value is upstream: {origin}.", CHECK,
                        hint="fix the first non-finite value, not the loss; keep a finiteness check on the loss "
                             "before optimizer.step (signalchain.Monitor)", loss=rep.loss))
    return out + _benign(rep)


def judge_numerics(rep: NumericsMeasurement) -> list[Finding]:
    out = judge_state(rep.before)
    if rep.locate is not None:
        out += judge_locate(rep.locate)
    # After a bad forward or backward, the update spreading the NaN into the weights is a consequence.
    if rep.after is not None and rep.trigger in (None, "state"):
        out += judge_state(rep.after, rep.before)
    if rep.error and rep.locate is None:
        out.append(make("nonfinite.first", "info", None, f"the numerics probe could not run a step: {rep.error}",
                        CHECK, hint="fix the step itself first"))
    return out
