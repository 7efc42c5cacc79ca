"""Read a training step's conventions from its taps, instead of assuming the reference's.

Real stacks lay the same quantities out differently:

    reference   targets [B, K, T] (frame time)       logits [B, K, T, V]      mask.loss [B, K, T]
    HF MusicGen labels  [B, T', K] with -100          logits [B*K, T', V]      (labels != -100)
                (T' = T + D: the delay pattern's time, D = largest delay)

`read_layout(trace)` works out, from shapes and values alone, how a trace's targets, logits and
masks are laid out, in which time each lives (frame time or delayed-pattern time, and each
codebook's delay), and which target positions are ignored. `StepView` then hands checks the
canonical arrays: targets and loss mask `[B, K, T']`, logits shape `[B, K, T', V]`, the decoder
inputs `[B, K, T_in]` (a `tokens.input` tap, or a `tokens.pattern` that holds them: see
`trace/shifts.py`), and the padding mask moved into target time. Where the layout cannot be told,
`problems` says why and the arrays are None, so a check can say it cannot judge rather than judge
the wrong axes. Where a tap could mean two things, the reading that makes the pipeline correct is
taken and `notes` says so (docs/taps.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .shifts import confident_delays, edge_delays, holds_decoder_inputs, ids_to_bkt, starts_with_constant

__all__ = ["StepView", "read_layout", "canonical_logits", "infer_delays", "delay_agreement", "DEFAULT_IGNORE_INDEX"]

#: torch's `cross_entropy(ignore_index=-100)` default, which HF's losses use: a target with this
#: value is ignored when no loss mask is tapped (a tap's `ignore_index=` meta overrides it).
DEFAULT_IGNORE_INDEX = -100


def _value(trace: Any, name: str) -> np.ndarray | None:
    rec = trace.get(name)
    if rec is None or rec.value is None:
        return None
    return np.asarray(rec.value)


def _shape(trace: Any, name: str) -> tuple[int, ...] | None:
    rec = trace.get(name)
    return tuple(int(x) for x in rec.shape) if rec is not None and rec.shape is not None else None


def canonical_logits(logits: np.ndarray, batch: int | None, codebooks: int | None) -> np.ndarray | None:
    """Logits as `[B, K, T, V]` from `[B, K, T, V]`, `[B*K, T, V]` or `[B, T, K, V]`; None when the
    layout cannot be told from `batch` and `codebooks`."""
    order = logits_order(tuple(logits.shape), batch, codebooks)
    if order == "BKTV":
        return logits
    if order == "(BK)TV":
        assert batch is not None
        return logits.reshape(batch, -1, *logits.shape[1:])
    if order == "BTKV":
        return np.swapaxes(logits, 1, 2)
    return None


def logits_order(shape: tuple[int, ...], batch: int | None, codebooks: int | None) -> str | None:
    if len(shape) == 4:
        if codebooks is None or shape[1] == codebooks:
            return "BKTV"
        if shape[2] == codebooks:
            return "BTKV"
        return None
    if len(shape) == 3 and batch and codebooks and shape[0] == batch * codebooks:
        return "(BK)TV"
    if len(shape) == 3 and batch and shape[0] % batch == 0 and codebooks is None:
        return "(BK)TV"
    return None


def _order_of(shape: tuple[int, ...], b: int | None, k: int | None, t: int | None) -> str | None:
    """How a [B, K, T]-like value is laid out: "BKT", "BTK", "(BK)T", "BT" (shared by codebooks)."""
    if len(shape) == 3:
        if (b is None or shape[0] == b) and (k is None or shape[1] == k) and (t is None or shape[2] == t):
            return "BKT"
        if (b is None or shape[0] == b) and (k is None or shape[2] == k) and (t is None or shape[1] == t):
            return "BTK"
        return None
    if len(shape) == 2:
        if b and k and shape[0] == b * k and (t is None or shape[1] == t):
            return "(BK)T"
        if (b is None or shape[0] == b) and (t is None or shape[1] == t):
            return "BT"
    return None


def _to_bkt(x: np.ndarray, order: str, b: int, k: int) -> np.ndarray:
    if order == "BKT":
        return x
    if order == "BTK":
        return np.swapaxes(x, 1, 2)
    if order == "(BK)T":
        return x.reshape(b, k, -1)
    return np.broadcast_to(x[:, None, :], (x.shape[0], k, x.shape[1]))  # "BT"


def delay_agreement(frames: np.ndarray, delayed: np.ndarray, valid: np.ndarray | None, k: int, d: int) -> float | None:
    """Share of compared positions where `delayed[:, k, t + d] == frames[:, k, t]` (None: nothing to compare)."""
    T, Tp = frames.shape[-1], delayed.shape[-1]
    lo_f, hi_f = max(0, -d), min(T, Tp - d)
    if hi_f - lo_f < max(1, T // 4):
        return None
    a = delayed[:, k, lo_f + d : hi_f + d]
    m = valid[:, k, lo_f + d : hi_f + d] if valid is not None else np.ones(a.shape, bool)
    n = int(m.sum())
    if n == 0:
        return None
    return float(((a == frames[:, k, lo_f:hi_f]) & m).sum() / n)


def infer_delays(frames: np.ndarray, delayed: np.ndarray, valid: np.ndarray | None = None,
                 max_delay: int | None = None) -> tuple[list[int], list[float]]:
    """Per codebook, the shift d at which `delayed[:, k, t + d] == frames[:, k, t]` agrees best,
    and that agreement. `valid` [B, K, T'] limits the comparison to positions of `delayed` that
    count. Shifts from -3 to `max_delay` (default T' - T + 3)."""
    T, Tp = frames.shape[-1], delayed.shape[-1]
    hi = max_delay if max_delay is not None else Tp - T + 3
    shifts, agreement = [], []
    for k in range(frames.shape[1]):
        best, score = 0, -1.0
        for d in range(-3, hi + 1):
            s = delay_agreement(frames, delayed, valid, k, d)
            if s is not None and s > score + 1e-9:
                best, score = d, s
        shifts.append(best)
        agreement.append(max(score, 0.0))
    return shifts, agreement


@dataclass
class StepView:
    """The canonical view of one recorded step (see the module doc). Arrays are None when absent."""

    batch: int | None = None
    codebooks: int | None = None
    targets: np.ndarray | None = None  # [B, K, T'] as the loss sees them (ignored positions included)
    mask: np.ndarray | None = None  # [B, K, T'] bool: the positions the loss counts
    ignored: np.ndarray | None = None  # [B, K, T'] bool: targets holding the ignore index
    logits_shape: tuple[int, ...] | None = None  # [B, K, T', V]
    cardinality: int | None = None  # V: classes the logits predict
    tokens: np.ndarray | None = None  # [B, K, T] frame time
    padding: np.ndarray | None = None  # [B, T] or [B, K, T] frame time, as tapped
    padding_in_target_time: np.ndarray | None = None  # [B, K, T'] bool
    pattern_delays: list[int] | None = None  # the delay pattern the pipeline built (tokens.pattern / delay=)
    model_delays: list[int] | None = None  # the delays the model itself generates with (model_delay=)
    target_delays: list[int] | None = None  # where the targets hold each codebook's frames (pattern time)
    edge_delays: list[int] | None = None  # without tokens: the delays the counted positions' edges show
    inputs: np.ndarray | None = None  # [B, K, T_in] what the model reads (decoder input ids)
    input_stage: str | None = None  # the tap they came from: "tokens.input", or "tokens.pattern" read as inputs
    input_delays: list[int] | None = None  # where the inputs hold each codebook's frames
    padding_delays: list[int] | None = None  # the delays the padding mask was moved by into target time
    pattern_role: str | None = None  # what tokens.pattern holds: "pattern" or "input" (None: not tapped)
    orders: dict[str, str] = field(default_factory=dict)  # stage -> layout ("BKT", "BTK", "(BK)TV", …)
    ignore_index: int | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how an ambiguous tap was read, for an info finding

    @property
    def target_time(self) -> str:
        """"frame" when targets have the tokens' time axis, "pattern" when they are longer."""
        if self.targets is None or self.tokens is None:
            return "unknown"
        return "frame" if self.targets.shape[-1] == self.tokens.shape[-1] else "pattern"

    def describe(self) -> dict[str, Any]:
        """What was read, for a finding's evidence."""
        return {"orders": dict(self.orders), "ignore_index": self.ignore_index,
                "pattern_delays": self.pattern_delays, "model_delays": self.model_delays,
                "target_delays": self.target_delays, "edge_delays": self.edge_delays, "input_stage": self.input_stage,
                "pattern_role": self.pattern_role, "target_time": self.target_time}

    @property
    def training_delays(self) -> list[int] | None:
        """The delays the training step puts each codebook at: the pattern's (tapped or declared),
        else the targets' own (pattern time), else the inputs' less the start token's step."""
        if self.pattern_delays is not None:
            return self.pattern_delays
        if self.target_time == "pattern":
            return self.target_delays
        if self.input_delays is not None and self.inputs is not None and starts_with_constant(self.inputs):
            return [d - 1 for d in self.input_delays]
        if self.tokens is None:
            return self.edge_delays
        return None


def _batch_size(trace: Any) -> int | None:
    for name in ("tokens", "audio.cropped", "audio.original", "caption", "condition.tokens"):
        s = _shape(trace, name)
        if s:
            return s[0]
    return None


def _declared_delays(trace: Any) -> list[int] | None:
    """`delay=` on tokens.pattern, tokens.input or targets: the delay pattern, as the step says."""
    for name in ("tokens.pattern", "tokens.input", "targets"):
        rec = trace.get(name)
        d = rec.meta.get("delay") if rec is not None else None
        if isinstance(d, (list, tuple)) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                                for x in d):
            return [int(x) for x in d]
    return None


def _ids(trace: Any, name: str, v: StepView) -> np.ndarray | None:
    """A tapped id array as [B, K, T] (its layout recorded in `v.orders`), or None."""
    x = _value(trace, name)
    if x is None or x.dtype.kind not in "iu":
        return None
    t = v.targets.shape[-1] if v.targets is not None else None
    got = ids_to_bkt(x, v.batch, v.codebooks, t)
    if got is None:
        v.problems.append(f"{name} {list(x.shape)} is not [B, K, T], [B, T, K] or [B*K, T] (B={v.batch}, "
                          f"K={v.codebooks})")
        return None
    v.orders[name] = got[1]
    return got[0]


def _read_pattern(v: StepView, pattern: np.ndarray, declared: list[int] | None) -> None:
    """Tell whether tokens.pattern holds a delay pattern or decoder inputs, and its delays.

    Against targets on its own time axis the values tell: one step behind the targets, after a start
    column, it is what the model reads. Otherwise its delays against the frames are read and compared
    with what the step declares (`delay=`, `model_delay=`); a start column and no codebook at delay 0
    read as inputs (a delay pattern puts its first codebook at 0; AudioCraft's pattern sequence has
    an empty first step)."""
    role = holds_decoder_inputs(pattern, v.targets, v.mask) if v.targets is not None else None
    delays = None
    if v.tokens is not None and pattern.shape[:2] == v.tokens.shape[:2]:
        got = confident_delays(v.tokens, pattern, frame_valid=v.padding)
        delays = got[0] if got else None
    if role is None and delays is not None:
        ref = declared or v.model_delays
        shifted = [d - 1 for d in delays]
        if ref is not None and delays == list(ref):
            role = False
        elif ref is not None and shifted == list(ref) and starts_with_constant(pattern):
            role = True
        elif ref is None and starts_with_constant(pattern) and min(delays) >= 1:
            role = True
    v.pattern_role = "input" if role else "pattern"
    if role:
        v.notes.append("tokens.pattern holds decoder inputs (a start token, then the targets one step later): "
                       "read as tokens.input")
    elif delays is not None:
        v.pattern_delays = delays


def _model_delays(trace: Any) -> list[int] | None:
    """`model_delay=` on tokens.pattern, tokens.input or targets: the pattern the model generates with."""
    for name in ("tokens.pattern", "tokens.input", "targets"):
        rec = trace.get(name)
        d = rec.meta.get("model_delay") if rec is not None else None
        if isinstance(d, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
            return [int(x) for x in d]
    return None


def read_layout(trace: Any) -> StepView:
    """The canonical view of `trace` (recorded with values)."""
    v = StepView()
    tokens = _value(trace, "tokens")
    rec = trace.get("tokens")
    if tokens is not None and rec is not None and rec.meta.get("kind") == "symbolic":
        # symbolic ids [B, T]: one token stream, K = 1; several per step ([B, T, F], Octuple): not codebooks
        tokens = tokens[:, None, :] if tokens.ndim == 2 else None
    if tokens is not None and tokens.ndim != 3:
        tokens = None
    v.tokens = tokens
    v.batch = _batch_size(trace)
    lshape = _shape(trace, "logits")
    tshape = _shape(trace, "targets")
    v.codebooks = int(tokens.shape[1]) if tokens is not None else (lshape[1] if lshape and len(lshape) == 4 else None)
    if v.codebooks is None and lshape and len(lshape) == 3 and tshape and len(tshape) == 3 and v.batch:
        v.codebooks = lshape[0] // v.batch if lshape[0] % v.batch == 0 else None
    b, k = v.batch, v.codebooks
    if lshape:
        order = logits_order(lshape, b, k)
        if order is None:
            v.problems.append(
                f"logits {list(lshape)} are not [B, K, T, V], [B*K, T, V] or [B, T, K, V] for B={b}, K={k}"
            )
        else:
            v.orders["logits"] = order
            if order == "BKTV":
                v.logits_shape = lshape
            elif order == "BTKV":
                v.logits_shape = (lshape[0], lshape[2], lshape[1], lshape[3])
            else:
                kk = k or lshape[0] // (b or 1)
                v.logits_shape = (lshape[0] // kk, kk, lshape[1], lshape[2])
            v.cardinality = int(lshape[-1])
    t_len = v.logits_shape[2] if v.logits_shape else None
    rec = trace.get("targets")
    ignore = rec.meta.get("ignore_index") if rec is not None else None
    v.ignore_index = int(ignore) if isinstance(ignore, (int, np.integer)) else None
    targets = _value(trace, "targets")
    if targets is not None:
        order = _order_of(targets.shape, b, k, t_len)
        if order is None and t_len is None:
            order = _order_of(targets.shape, b, k, None)
        if order in (None, "BT") or (order == "(BK)T" and not (b and k)):
            v.problems.append(f"targets {list(targets.shape)} are not [B, K, T] or [B, T, K] (B={b}, K={k}, T={t_len})")
        else:
            v.orders["targets"] = order
            v.targets = _to_bkt(targets, order, b or targets.shape[0], k or _k_of(targets, order))
            k = k or v.targets.shape[1]
            v.codebooks = k
    mask = _value(trace, "mask.loss")
    if mask is not None and v.targets is not None:
        order = _order_of(mask.shape, v.targets.shape[0], v.targets.shape[1], v.targets.shape[2])
        if order in (None, "BT"):  # a mask shared by every codebook broadcasts: the mean divides wrongly
            v.problems.append(f"mask.loss {list(mask.shape)} does not fit targets {list(v.targets.shape)} ([B, K, T'])")
        else:
            v.orders["mask.loss"] = order
            v.mask = np.ascontiguousarray(_to_bkt(mask.astype(bool), order, *v.targets.shape[:2]))
    if v.targets is not None:
        if v.mask is not None:
            # Whatever the loss excludes may hold any negative id; an ignore index is what it holds there.
            neg = v.targets[~v.mask]
            neg = neg[neg < 0]
            if neg.size and v.ignore_index is None:
                vals, counts = np.unique(neg, return_counts=True)
                v.ignore_index = int(vals[np.argmax(counts)])
        elif v.ignore_index is None and (v.targets == DEFAULT_IGNORE_INDEX).any():
            v.ignore_index = DEFAULT_IGNORE_INDEX
        v.ignored = v.targets == v.ignore_index if v.ignore_index is not None else np.zeros(v.targets.shape, bool)
        if v.mask is None and v.ignore_index is not None:
            v.mask = ~v.ignored
    v.padding = _value(trace, "mask.padding")
    declared = _declared_delays(trace)
    v.model_delays = _model_delays(trace)
    pattern = _ids(trace, "tokens.pattern", v)
    if pattern is not None:
        _read_pattern(v, pattern, declared)
    inputs = _ids(trace, "tokens.input", v)
    if inputs is not None:
        v.inputs, v.input_stage = inputs, "tokens.input"
    elif v.pattern_role == "input":
        v.inputs, v.input_stage = pattern, "tokens.pattern"
    if declared is not None:
        v.pattern_delays = declared
    if tokens is not None and v.inputs is not None and v.inputs.shape[:2] == tokens.shape[:2]:
        got = confident_delays(tokens, v.inputs, frame_valid=v.padding)
        v.input_delays = got[0] if got else None
    if tokens is not None and v.targets is not None and v.target_time == "pattern" \
            and v.targets.shape[:2] == tokens.shape[:2]:
        got = confident_delays(tokens, v.targets, v.mask, v.padding)
        v.target_delays = got[0] if got else None
    if tokens is None and v.mask is not None and v.model_delays is not None:
        v.edge_delays = edge_delays(v.mask)  # read only where the model's own delays are there to compare
    if v.target_time == "pattern":
        v.padding_delays = _padding_delays(v)
    v.padding_in_target_time = _padding_in_target_time(v)
    return v


def _k_of(x: np.ndarray, order: str) -> int:
    return int(x.shape[1] if order == "BKT" else x.shape[2])


def _padding_in_target_time(v: StepView) -> np.ndarray | None:
    """The padding mask laid into the targets' time: a target at position t of codebook k is real
    when frame t - delay(k) is. Frame-time targets need no shift."""
    if v.padding is None or v.targets is None:
        return None
    B, K, Tp = v.targets.shape
    pad = v.padding.astype(bool)
    if pad.ndim == 2:
        pad = np.broadcast_to(pad[:, None, :], (pad.shape[0], K, pad.shape[1]))
    if pad.ndim != 3 or pad.shape[0] != B or pad.shape[1] not in (1, K):
        return None
    pad = np.broadcast_to(pad, (B, K, pad.shape[2]))
    T = pad.shape[2]
    if T == Tp:
        return np.ascontiguousarray(pad)
    delays = v.padding_delays
    if delays is None or len(delays) != K:
        return None
    out = np.zeros((B, K, Tp), dtype=bool)
    for k, d in enumerate(delays):
        lo, hi = max(0, d), min(Tp, T + d)
        if hi > lo:
            out[:, k, lo:hi] = pad[:, k, lo - d : hi - d]
    return out


def _padding_delays(v: StepView) -> list[int] | None:
    """Where each codebook's frames sit in the targets: the pattern's delays when the targets follow
    them, else the delays the targets themselves show (a target holds padding when the frame it holds
    is padding, whatever pattern was meant)."""
    pattern, own = v.pattern_delays, v.target_delays
    if pattern is not None and v.tokens is not None and v.targets is not None and len(pattern) == v.targets.shape[1]:
        agree = [delay_agreement(v.tokens, v.targets, v.mask, k, d) for k, d in enumerate(pattern)]
        if all(a is not None and a >= 0.9 for a in agree):
            return pattern
    return own if own is not None else pattern
