"""Why an op made a non-finite value: the method's ten causes, read off the op and its input statistics.

Pure: an `OpEvent` (or two consecutive stages) in, a cause key, a sentence with the numbers and a
concrete next step out. No torch.
"""

from __future__ import annotations

import math
from typing import Any

from ..records.numerics import OpEvent, StageStatus

__all__ = ["CAUSES", "likely_cause", "stage_cause", "op_name"]

CAUSES = {
    "division_by_zero": "division by zero",
    "log_domain": "logarithm of zero or a negative value",
    "normalisation": "invalid normalisation statistics",
    "exp_overflow": "exponential overflow",
    "huge_update": "very large gradients or updates",
    "low_precision": "an unstable lower-precision operation",
    "input": "non-finite input audio or cached features",
    "empty_reduction": "an empty reduction",
    "invalid_mask": "an invalid mask (softmax over an all-masked row)",
    "state": "corrupted model or optimizer state",
    "overflow": "values beyond the float range",
    "masked_reduction": "a reduction over positions the loss mask excludes",
    "unknown": "not recognised",
}

_LOG_MAX = {"float32": 88.72, "float64": 709.78, "float16": 11.09, "bfloat16": 88.72}
_MAX = {"float16": 65504.0, "bfloat16": 3.39e38, "float32": 3.40e38}
_REDUCE = ("mean", "var", "std", "nanmean", "median", "var_mean", "std_mean", "amax", "amin", "max", "min")
_SOFTMAX = ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "_scaled_dot_product")
_EXP = ("exp", "exp2", "expm1", "exp_", "pow", "sinh", "cosh", "softplus", "logsumexp")
_LOG = ("log", "log2", "log10", "log1p", "log_", "xlogy")
_NORM = ("native_layer_norm", "layer_norm", "native_batch_norm", "batch_norm", "native_group_norm",
         "group_norm", "rms_norm", "_fused_rms_norm", "rsqrt", "instance_norm", "_native_batch_norm_legit")
_DIV = ("div", "div_", "reciprocal", "addcdiv", "addcdiv_", "remainder", "fmod", "true_divide", "floor_divide")


def op_name(op: str | None) -> str:
    """`aten.native_layer_norm.default` -> `native_layer_norm` (a backward's forward op kept as is)."""
    if not op:
        return ""
    head = op.split(" ")[0]
    parts = head.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]


def _num(x: Any, fmt: str = ".3g") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else str(x)


def _plus(x: dict[str, Any]) -> str:
    """What a range of finite values leaves out: the input's own NaN and inf, counted."""
    bad = [f"{x[k]} {name}" for k, name in (("inf", "inf"), ("nan", "NaN")) if x.get(k)]
    return f" (plus {' and '.join(bad)} of {x.get('numel')} values)" if bad else ""


def _first_float(inputs: list[dict[str, Any]]) -> dict[str, Any]:
    return next((i for i in inputs if "nan" in i), {})


def likely_cause(ev: OpEvent) -> tuple[str, str, str]:
    """(cause key, explanation with numbers, next step) for the op that made the first bad value."""
    name, fwd = op_name(ev.op), op_name(ev.forward_op)
    floats = [i for i in ev.inputs if "nan" in i or i.get("numel") == 0]
    x = _first_float(ev.inputs)
    low = ev.dtype in ("float16", "bfloat16")
    if ev.kind == "state":
        return ("state", f"it reads {ev.target}, which already holds non-finite values",
                "find when that tensor went bad: load checkpoints with a finiteness check, scan the optimizer "
                "state after resuming, and replay the update that wrote it (signalchain.Monitor(snapshot=True))")
    if ev.phase == "optimizer":
        at = 2 if name.startswith("addcdiv") else (1 if name in _DIV else -1)
        denom = ev.inputs[at] if 0 <= at < len(ev.inputs) else {}
        if denom.get("zero_fraction"):
            return (
                "division_by_zero",
                f"the update of {ev.target} divides by a denominator with exact zeros "
                f"({denom['zero_fraction']:.1%} of it) where the gradient was exactly 0, "
                "so 0/0 (Adam: sqrt(v) + eps = 0)",
                "give the optimizer eps > 0 (Adam's default 1e-8), and check parameters that get no gradient",
            )
        return ("huge_update", f"the update wrote {ev.nan} NaN / {ev.inf} inf into {ev.target}",
                "lower the learning rate, clip gradients, and check the optimizer's eps and betas")
    if name in _REDUCE and any(i.get("numel") == 0 for i in floats):
        return ("empty_reduction", f"`{name}` ran over an empty tensor (shape {floats[0].get('shape')}): "
                "the mean of nothing is 0/0", "guard the reduction: divide a sum by count.clamp(min=1), or skip "
                "groups the mask leaves empty")
    ints = [i for i in ev.inputs if "int_min" in i]
    if name.startswith(("nll_loss", "cross_entropy")) and ints and ints[0]["int_min"] == ints[0]["int_max"] \
            and ints[0]["int_min"] in ev.scalars:
        return ("empty_reduction", f"`{name}` got {ints[0]['numel']} targets that all equal the ignore index "
                f"{ints[0]['int_min']}: the mean over no counted target is 0/0",
                "the loss mask (or the labels set to the ignore index) leaves nothing: see mask.empty; build the "
                "ignored labels from the valid lengths, and guard empty batches")
    if name in _SOFTMAX and x.get("all_neg_inf_rows"):
        return ("invalid_mask", f"softmax over {x['all_neg_inf_rows']} of {x.get('rows')} rows that are entirely "
                "-inf (every position masked): exp(-inf)/sum = 0/0",
                "keep at least one valid key per row (an always-valid null slot), or zero fully-masked rows "
                "after the softmax")
    if low and ev.fp32_finite:
        return ("low_precision", f"the same `{name}` on float32 inputs is finite: {ev.dtype} overflowed "
                f"(largest {ev.dtype} value {_num(_MAX.get(ev.dtype))}; "
                f"inputs up to {_num(x.get('abs_max'))}{_plus(x)})",
                "compute this op in float32 (cast its inputs with .float(), or wrap it in "
                "torch.autocast(enabled=False)) and cast back afterwards")
    if name in _EXP or (fwd in _EXP and ev.phase == "backward"):
        limit = _LOG_MAX.get(x.get("dtype", ev.dtype), 88.72)
        return ("exp_overflow", f"exp of values up to {_num(x.get('max'))} > ln(max {x.get('dtype', ev.dtype)}) = "
                f"{limit}{_plus(x)}",
                "keep the exponent bounded (clamp it, or use logsumexp / log_softmax); a log-space "
                "parameter must be initialised with log(value), not the value")
    if name in _LOG:
        return ("log_domain", f"log of values down to {_num(x.get('min'))} ({_num(x.get('zero_fraction', 0), '.1%')} "
                f"exact zeros, {_num(x.get('negative_fraction', 0), '.1%')} negative){_plus(x)}",
                "use torch.xlogy for 0·log 0, log(x.clamp_min(eps)), or log_softmax instead of log(softmax)")
    if name in _NORM or fwd in _NORM or (name in ("sqrt", "rsqrt") and (x.get("min") or 0) < 0):
        eps = next((s for s in ev.scalars if isinstance(s, float)), None)
        rows = f"{x.get('constant_rows')} of {x.get('rows')} rows are constant (variance 0)" if x.get("constant_rows") \
            else f"inputs from {_num(x.get('min'))} to {_num(x.get('max'))}{_plus(x)}"
        return (
            "normalisation",
            f"normalisation statistics are invalid: {rows}" + (f", eps = {eps}" if eps is not None else ""),
            "use eps >= 1e-5 inside the square root, and keep padded or masked slots out of the statistics",
        )
    if name in _DIV or (ev.phase == "backward" and fwd in ("sqrt", "rsqrt", "div", "norm", "linalg_vector_norm")):
        if ev.phase == "backward" and fwd in ("sqrt", "rsqrt", "norm", "linalg_vector_norm"):
            return ("division_by_zero", f"the derivative of `{fwd}` at 0 is infinite: its gradient divides by 0 "
                    "where the input was exactly 0 (an all-zero vector), and inf·0 = NaN",
                    "add eps inside the root (sqrt(x + eps)), not outside, or mask the zero rows out before it")
        zeros = [i for i in floats[1:] or floats if i.get("zero_fraction")]
        detail = f"the denominator has exact zeros ({zeros[0]['zero_fraction']:.1%} of it)" if zeros \
            else "a denominator is zero or tiny"
        note = f"; in {ev.dtype} an eps below {6e-8 if ev.dtype == 'float16' else 1e-38:g} rounds to 0" if low else ""
        return ("division_by_zero", detail + note, "add eps to the denominator or clamp it (x / d.clamp_min(1e-6)), "
                "and look for silent, constant or empty examples")
    if ev.phase == "backward" and ev.inf and not ev.nan:
        return (
            "huge_update",
            f"gradients overflow in the backward of `{fwd or name}` (inputs up to {_num(x.get('abs_max'))}{_plus(x)})",
            "clip gradients, lower the learning rate or the loss scale, and look for a layer with huge activations",
        )
    if low:
        return ("low_precision", f"`{name}` overflowed or lost precision in {ev.dtype}",
                "compute this op in float32 and cast back")
    if ev.inf:
        return ("overflow", f"`{name}` produced inf from finite inputs up to {_num(x.get('abs_max'))}",
                "find why the values grow this large (learning rate, a missing normalisation, a scale)")
    carried = [i for i in floats if i.get("inf") or i.get("nan")]
    if carried:
        return ("overflow", f"`{name}` made NaN from inputs that already hold {carried[0].get('inf', 0)} inf "
                "(inf - inf or 0 × inf)", "find where the inf came from: the input's own origin is upstream")
    return ("unknown", f"`{name}` produced NaN from finite inputs", "print its inputs at the location given")


def stage_cause(stage: StageStatus, previous: StageStatus | None) -> tuple[str, str, str]:
    """The cause when a stage turns non-finite with no torch op to blame (numpy code between two taps)."""
    if previous is not None and stage.all_bad_examples and previous.row_abs_max:
        silent = [i for i in stage.all_bad_examples if i < len(previous.row_abs_max) and previous.row_abs_max[i] == 0]
        if silent:
            return ("division_by_zero", f"example(s) {silent} are all zeros at {previous.name} and entirely NaN at "
                    f"{stage.name}: normalising a silent or constant example divides by its zero std/peak/RMS",
                    f"clamp the divisor in the code between the {previous.name} and {stage.name} taps "
                    "(x / max(std, 1e-8)), and drop or flag silent clips")
    if previous is not None and previous.masked_out_only and previous.nan + previous.inf > 0:
        return ("masked_reduction", f"{previous.name} holds {previous.nan} NaN and {previous.inf} inf, every one at a "
                f"position the loss mask excludes, and {stage.name} is not finite: the reduction takes the excluded "
                "positions in (NaN x 0 is NaN: multiplying by the mask does not remove them)",
                f"select the counted positions before the reduction (`logits[mask]` and `targets[mask]`, or "
                f"`ce[mask].mean()`), or fill the excluded {previous.name} with a finite value; non-finite values at "
                "excluded positions can be by design (AudioCraft's `compute_predictions` fills them with NaN)")
    where = f"between the {previous.name} and {stage.name} taps" if previous else f"before the {stage.name} tap"
    return ("unknown", f"made by code {where} that torch does not see (numpy or Python)",
            f"check the values {where} with np.isfinite, example by example")
