"""Data-path checks on one recorded step: batch sizes, shapes, masks, targets, initial loss.

Each function reads a `Trace` (recorded with values, on a freshly built model) and returns findings.
"""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ..trace import Trace
from ..trace.layout import delay_agreement, infer_delays, read_layout
from ._symbolic import in_words
from ._util import (
    temporal_mutual_information,
    unigram_entropy,
    value,
)
from .base import make
from .inputs import judge_tapped_inputs

__all__ = ["judge_batch_sizes", "judge_shapes", "judge_initial_loss", "judge_masks", "judge_targets", "DATA_CHECKS"]

CHECK = "checks.data"
MAX_SHIFT = 3


def judge_batch_sizes(trace: Trace) -> list[Finding]:
    """Audio, captions and metadata must describe the same number of examples."""
    sizes = {n: trace[n].shape[0] for n in ("audio.original", "caption", "metadata") if n in trace and trace[n].shape}
    if len(set(sizes.values())) <= 1:
        return []
    ref_name = next(iter(sizes))
    odd = [n for n, b in sizes.items() if b != sizes[ref_name]]
    return [make("batch.size_mismatch", "error", odd[0],
                 f"{ref_name} holds {sizes[ref_name]} examples but {odd[0]} holds {sizes[odd[0]]}: examples and their "
                 "descriptions no longer pair up", CHECK,
                 hint=f"find where {odd[0]} is built per batch; an item was dropped or duplicated (a filter, a failed "
                      "decode that was skipped for one list only)", sizes=sizes)]


def judge_shapes(trace: Trace) -> list[Finding]:
    """Logits, targets and the loss mask must describe the same positions, in whatever layout the
    pipeline uses ([B, K, T] or HF's [B, T, K] targets; [B, K, T, V] or [B*K, T, V] logits)."""
    out: list[Finding] = []
    logits, targets, mask = trace.get("logits"), trace.get("targets"), trace.get("mask.loss")
    view = read_layout(trace)
    if logits is not None and targets is not None and targets.value is not None:
        predicted = list(view.logits_shape[:3]) if view.logits_shape else None
        have = list(view.targets.shape) if view.targets is not None else None
        if (predicted is None or have is None) and plain_cross_entropy_fits(logits.shape, targets.shape):
            # Not codebooks × frames (one target per window or example, or flattened [N, V] / [N]), but
            # the shapes a cross-entropy takes as they are: nothing to align, only the frame checks
            # cannot read them.
            out.append(make("shape.unframed", "info", "targets",
                            f"logits {logits.shape} and targets {targets.shape} are not codebooks × frames, but fit "
                            "a cross-entropy as they are (one class per target): the frame-level checks (delays, "
                            "padding against frames) do not apply to this layout", CHECK,
                            logits=logits.shape, targets=targets.shape))
        elif predicted is None or have is None or predicted != have:
            out.append(make("shape.mismatch", "error", "targets",
                            f"targets have shape {targets.shape} but logits {logits.shape} predict "
                            f"{predicted if predicted is not None else '?'} [B, K, T] (+{logits.shape[-1]} classes)",
                            CHECK, hint="the loss may be broadcasting or slicing silently; align targets with logits "
                                        "before the loss (AudioCraft asserts logits.shape[:-1] == targets.shape)",
                            logits=logits.shape, targets=targets.shape, layout=view.describe()))
    if mask is not None and targets is not None and view.targets is not None and view.mask is None \
            and mask.value is not None:
        out.append(
            make(
                "shape.mismatch",
                "error",
                "mask.loss",
                f"the loss mask has shape {mask.shape} but targets have {targets.shape}: it broadcasts or is sliced",
                CHECK,
                hint="build the mask per codebook and frame, like the targets",
                mask=mask.shape,
                targets=targets.shape,
                layout=view.describe(),
            )
        )
    return out


def plain_cross_entropy_fits(logits: object, targets: object) -> bool:
    """Shapes `torch.nn.functional.cross_entropy` takes as they are: class scores last (`[..., V]`
    with targets `[...]`) or second (`[N, V, ...]` with `[N, ...]`)."""
    try:
        lg, tg = [int(x) for x in logits], [int(x) for x in targets]  # type: ignore[union-attr]
    except TypeError:
        return False
    if len(lg) < 2 or len(lg) != len(tg) + 1:
        return False
    return lg[:-1] == tg or (lg[0] == tg[0] and lg[2:] == tg[1:])


def judge_initial_loss(trace: Trace) -> list[Finding]:
    """A fresh model's cross-entropy should sit near ln(cardinality) for every codebook."""
    loss = trace.get("loss")
    logits = trace.get("logits")
    if loss is None or logits is None or not logits.shape:
        return []
    mask = read_layout(trace).mask
    if mask is not None and not mask.any():
        return []  # nothing reaches the loss: mask.empty says so, the loss value means nothing
    card = int(logits.shape[-1])
    expected = math.log(card)
    per = value(trace, "loss.per_codebook")
    values = [float(v) for v in np.atleast_1d(per)] if per is not None else [float(loss.summary.get("value", "nan"))]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return []
    worst = max(values, key=lambda v: abs(v - expected))
    if abs(worst - expected) <= max(1.0, 0.25 * expected):
        return []
    above = worst > expected
    if above:
        return [make("loss.initial", "warning", "loss",
                     f"initial loss {worst:.3f} is above ln({card}) = {expected:.3f} by {worst - expected:.2f} nats: "
                     "the model starts worse than a uniform guess over its codes", CHECK,
                     hint="logits are far from uniform and confidently wrong: check the output scaling, a temperature "
                          "or the init (for a pretrained start, that its weights loaded and match this vocabulary)",
                     per_codebook=values, expected=expected, cardinality=card)]
    # Below a uniform guess: what a pretrained start (the usual fine-tuning run) looks like, or targets
    # leaking into the inputs (which the input checks judge on their own evidence). Not a verdict alone.
    return [make("loss.initial", "info", "loss",
                 f"initial loss {worst:.3f} is below ln({card}) = {expected:.3f} by {expected - worst:.2f} nats: the "
                 "model predicts these targets before any update (a pretrained start, or targets visible in its "
                 "inputs)",
                 CHECK, hint="expected when fine-tuning a trained model; for a model trained from scratch, see the "
                             "targets.misaligned checks (inputs compared with targets) and tap tokens.input "
                             "(docs/taps.md)",
                 per_codebook=values, expected=expected, cardinality=card)]


def judge_masks(trace: Trace) -> list[Finding]:
    """The loss must keep real frames (mask.empty) and only real frames (mask.padding_trained).

    The padding mask lives in frame time; a loss mask over a delay pattern lives in pattern time,
    so the padding is moved by each codebook's delay before the two are laid over each other."""
    view = read_layout(trace)
    mask = view.mask
    if mask is None or "mask.loss" not in trace and view.ignore_index is None:
        return []
    padding = view.padding
    out: list[Finding] = []
    total, valid = mask.size, int(mask.sum())
    per_k = mask.mean(axis=(0, 2))
    pad_frac = float(padding.astype(bool).mean()) if padding is not None else None
    stage = "mask.padding" if pad_frac is not None and pad_frac <= 0.05 else "mask.loss"
    how = "loss mask" if "mask.loss" in trace else f"targets other than the ignore index {view.ignore_index}"
    if valid == 0 or (per_k == 0).any():
        empty = [int(k) for k in np.flatnonzero(per_k == 0)]
        out.append(
            make(
                "mask.empty",
                "error",
                stage,
                f"the {how} keeps {valid} of {total} target positions"
                + (f"; codebooks {empty} have none" if valid else ""),
                CHECK,
                hint="the loss has nothing to learn from (a mean over nothing is NaN); check how the "
                "padding mask or the ignored labels are built from the valid lengths (an inverted "
                f"comparison, lengths in {in_words(trace, 'samples vs frames', 'bars vs tokens')}, every label set "
                "to the ignore index)",
                valid=valid,
                total=total,
                per_codebook=per_k.tolist(),
                padding_valid_fraction=pad_frac,
                layout=view.describe(),
            )
        )
    elif valid / total < 0.05:
        out.append(make("mask.empty", "warning", stage,
                        f"the {how} keeps only {valid} of {total} target positions ({100 * valid / total:.1f}%)", CHECK,
                        hint="nearly nothing reaches the loss; compare the mask with the "
                             f"{in_words(trace, 'clips', 'sequences')}' valid lengths",
                        valid=valid, total=total, per_codebook=per_k.tolist(), padding_valid_fraction=pad_frac))
    out += _padding_against_lengths(trace, padding)
    pad = view.padding_in_target_time
    if pad is not None:
        trained = int((mask & ~pad).sum())
        if trained:
            out.append(make("mask.padding_trained", "error", "mask.loss",
                            f"{trained} loss positions lie in padding ({in_words(trace, 'frames', 'positions')} the "
                            "padding mask marks invalid"
                            + (f", moved by the delays {view.padding_delays}" if view.target_time == "pattern" else "")
                            + ")", CHECK,
                            hint="AND the loss mask with the padding mask (or set padded labels to the ignore index): "
                                 "padding trained as targets teaches the model to emit "
                                 + in_words(trace, "silence", "PAD ids where a piece goes on"), positions=trained,
                            layout=view.describe()))
    return out


def _padding_against_lengths(trace: Trace, padding: np.ndarray | None) -> list[Finding]:
    """`mask.padding` against the clips' own lengths (`lengths=` on `audio.cropped`): a frame past a
    clip's last sample is padding whatever the mask says. A mask built from the padded length marks
    every frame real, and the loss then trains on the zeros after each short clip."""
    rec = trace.get("audio.cropped")
    if padding is None or rec is None or padding.ndim != 2 or not rec.shape:
        return []
    lengths = rec.meta.get("lengths")
    try:
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        return []
    samples, frames = int(rec.shape[-1]), int(padding.shape[-1])
    if lengths.size != padding.shape[0] or frames < 4 or samples < frames or (lengths > samples).any():
        return []
    hop = samples / frames
    real = np.ceil(lengths / hop).astype(np.int64)
    marked = padding.astype(bool).sum(axis=1)
    over = [i for i in range(len(real)) if marked[i] >= real[i] + 2 and real[i] < frames]
    if not over:
        return []
    i = over[0]
    extra = int(sum(int(marked[j] - real[j]) for j in over))
    return [make("mask.padding_trained", "error", "mask.padding",
                 f"the padding mask marks {int(marked[i])} of {frames} frames of example {i} real, but its clip holds "
                 f"{int(lengths[i])} samples = {int(real[i])} frames at {hop:.0f} samples per frame: {extra} padded "
                 f"frames over {len(over)} examples counted as real", CHECK,
                 hint="build the padding mask from each clip's own length before padding (frames = ceil(length / "
                      "hop)), not from the padded tensor's length", examples=over[:20], marked=marked.tolist(),
                 expected=real.tolist(), hop=hop)]


def judge_targets(trace: Trace) -> list[Finding]:
    """Targets must be codes of the audio, aligned with the logits, and carry information.

    Targets may hold an ignore index where the loss excludes them, and may live in the delay
    pattern's time: each codebook is then expected at the delay the pipeline's own pattern gives
    it (`tokens.pattern`, or `delay=` on the tap)."""
    view = read_layout(trace)
    targets = view.targets
    if targets is None:
        return []
    tokens = view.tokens
    mask = view.mask if view.mask is not None else np.ones(targets.shape, bool)
    card = view.cardinality
    out: list[Finding] = []
    if card is not None:
        bad_at = mask & ((targets < 0) | (targets >= card))
        if bad_at.any():
            bad = int(bad_at.sum())
            vals = targets[bad_at]
            out.append(make("tokens.out_of_range", "error", "targets",
                            f"{bad} targets the loss counts lie outside [0, {card}) (min {int(vals.min())}, max "
                            f"{int(vals.max())})", CHECK,
                            hint="a special/pad id or an unshifted vocabulary leaks into the targets; positions the "
                                 "loss must skip need the ignore index (-100) there",
                            count=bad, cardinality=card, ignore_index=view.ignore_index))
    valid = targets[mask]
    if valid.size == 0:
        return out  # an empty loss mask is reported by judge_masks; nothing to align here
    per_k = [np.unique(targets[:, k][mask[:, k]]) for k in range(targets.shape[1])]
    if all(u.size <= 1 for u in per_k):
        values = [int(u[0]) for u in per_k if u.size]
        what = f"every one of {valid.size} valid targets is {values[0]}" if len(set(values)) == 1 else \
            f"each codebook's targets are one constant value ({values})"
        return out + [make("targets.constant", "error", "targets", what, CHECK,
                           hint="the targets carry no information: check what is passed as targets (a zero tensor, "
                                "a fill value, the pad id, an index instead of a "
                                f"{in_words(trace, 'code', 'token id')})",
                           values=values,
                           count=int(valid.size))]
    declared = trace["targets"].meta.get("shift")
    shift = int(declared) if declared is not None else 0
    if tokens is not None and tokens.shape[:2] == targets.shape[:2]:
        frame_time = tokens.shape[-1] == targets.shape[-1]
        base = [0] * tokens.shape[1] if frame_time else view.pattern_delays
        if base is not None and len(base) != tokens.shape[1]:
            base = None
        read = _shift_read_from_inputs(view, base) if declared is None else None
        shift = read if read is not None else shift
        span = targets.shape[-1] - tokens.shape[-1]
        best_d, agree_k = infer_delays(tokens, targets, mask, max_delay=max(span, 0) + MAX_SHIFT)
        top = float(np.mean(agree_k))
        if top < 0.5:
            mi = temporal_mutual_information(targets)
            out.append(make("targets.random", "error", "targets",
                            f"targets match the tokens in at most {100 * top:.0f}% of positions at any shift within "
                            f"±{MAX_SHIFT} {in_words(trace, 'frames', 'positions')} of the expected one (temporal "
                            f"information {mi:.3f} nats)", CHECK,
                            hint="the targets are not the "
                                 f"{in_words(trace, 'codes of this audio', 'ids of this batch')}: check that targets "
                                 "come from the same "
                                 "batch (no shuffle, no stale buffer, no random init left in place)",
                            best_delay=best_d, agreement=top, temporal_mi=mi))
        else:
            # s: targets[t] = tokens[t + s] in the layout's own time (pattern delays taken out).
            shifts = [b - d for b, d in zip(base, best_d)] if base is not None else None
            at_expected = [delay_agreement(tokens, targets, mask, k, b - shift) or 0.0
                           for k, b in enumerate(base)] if base is not None else None
            trained = view.training_delays
            misaligned = shifts is not None and at_expected is not None and \
                (shifts != [shift] * len(shifts) or min(at_expected) < 0.98)
            if misaligned and declared is None and read is None and frame_time and view.pattern_role is None \
                    and shifts == [1] * len(shifts) and min(agree_k) >= 0.999 and not mask[..., -1].any():
                # Targets one step ahead of the tokens, and nothing that says what the model reads: the
                # text-LM convention (the model reads tokens[t] and predicts tokens[t + 1]) is correct,
                # an off-by-one on logits already aligned with the codes is not. Not an error to guess
                # (where the last step, which has no next token, is left out of the loss).
                out.append(make("tap.ambiguous", "info", "targets",
                                "targets equal the tokens one step ahead (targets[t] = tokens[t + 1]) in every "
                                "codebook: right when the model reads the tokens themselves (the text-LM shift), "
                                "wrong when its logits are already aligned with the codes; nothing tapped tells which",
                                CHECK, hint="tap what the model reads as tokens.input, or declare the shift on the "
                                            "targets tap (`shift=1`); docs/taps.md",
                                shift_per_codebook=shifts, agreement=agree_k, layout=view.describe()))
                misaligned = False
            if misaligned and read is None:  # with inputs tapped, judge_tapped_inputs says it (input vs targets)
                out.append(make("targets.misaligned", "error", "targets",
                                "targets equal the tokens shifted by " + in_words(
                                    trace, f"{shifts} frames per codebook (expected {shift} everywhere",
                                    f"{shifts[0]} positions (expected {shift}")
                                + ("" if frame_time else f" after the pipeline's own delays {base}")
                                + f"; agreement at the expected shifts {[round(100 * a, 1) for a in at_expected]}%)",
                                CHECK, hint="the model input and its target are offset wrongly (an off-by-one, "
                                + in_words(trace, "the delay pattern applied twice or built for another number of "
                                           "codebooks", "the shift done twice, or not at all")
                                + "); logits[t] must predict the token the model has not seen",
                                shift_per_codebook=shifts, expected_shift=shift, delays=best_d, pattern_delays=base,
                                agreement=agree_k, layout=view.describe()))
            else:
                out += _model_delay_mismatch(view, trained)
    elif tokens is None:
        # Without tokens the training delays are read off the edges of what the loss counts, and
        # only set where the model's own delays are there to compare them with.
        out += _model_delay_mismatch(view, view.training_delays)
        mi = temporal_mutual_information(targets)
        if mi < 0.02:
            out.append(make("targets.random", "warning", "targets",
                            f"consecutive targets share no information ({mi:.3f} nats); "
                            + in_words(trace, "codec tokens of real audio do", "tokens of real music do"),
                            CHECK, hint="tap the tokens as well so targets can be matched against them",
                            temporal_mi=mi, unigram_entropy=unigram_entropy(targets, mask)))
    return out


def _model_delay_mismatch(view, trained: list[int] | None) -> list[Finding]:
    """Targets laid out in a delay pattern other than the one the model generates with."""
    model = view.model_delays
    if model is None or trained is None or len(model) != len(trained):
        return []
    if view.tokens is None:  # delays read from the counted positions' edges are relative to the earliest
        model = [d - min(model) for d in model]
    if trained == model:
        return []
    wrong = [k for k, (b, m) in enumerate(zip(trained, model)) if b != m]
    read = "" if view.tokens is not None else " (read from where each codebook's counted targets begin and end)"
    return [make("targets.misaligned", "error", "targets",
                 f"the training pattern delays the codebooks by {trained} frames{read}, but the model "
                 f"generates with the delays {model}: codebooks {wrong} are trained at "
                 "positions generation never asks them for", CHECK,
                 hint="build the labels with the model's own delay pattern (for HF MusicGen "
                      "`decoder.build_delay_pattern_mask`; stereo checkpoints share a delay per "
                      "codebook pair, mono ones do not)",
                 pattern_delays=trained, model_delays=model, codebooks=wrong, layout=view.describe())]


def _shift_read_from_inputs(view, base: list[int] | None) -> int | None:
    """The shift of targets against tokens that the tapped inputs make right: inputs at step t + 1 hold
    the target of step t, so inputs `r` steps late against the tokens (pattern delays taken out) mean
    targets `1 - r` steps ahead. None without inputs on the targets' time axis, or with inputs that
    are not uniformly late."""
    x, y = view.inputs, view.targets
    if x is None or y is None or base is None or view.input_delays is None or x.shape[-1] != y.shape[-1]:
        return None
    late = {d - b for d, b in zip(view.input_delays, base)}
    return 1 - late.pop() if len(late) == 1 else None


DATA_CHECKS = (judge_batch_sizes, judge_shapes, judge_initial_loss, judge_masks, judge_targets, judge_tapped_inputs)
