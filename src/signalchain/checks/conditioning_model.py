"""Judge the condition on the model side: the embedding (collapsed?), its use by the fusion (do the
logits move with the caption?), gradient reach into the conditioning path, and guidance at generation.

`prior` arguments are the findings made earlier in the family: a stage already known to be broken
explains what follows it, and only the earliest stage is blamed.
"""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ..records.conditioning import (
    ConditionBatch,
    ConditionData,
    ConditionGrads,
    CondParam,
    GuidanceProbe,
    Sensitivity,
)
from .base import make

__all__ = ["judge_collapse", "judge_sensitivity", "judge_condition_grads", "judge_guidance", "caption_sensitive",
           "fusion_silent", "expected_changes"]

CHECK = "checks.conditioning"
UPSTREAM = ("caption.empty", "condition.tokens_unknown", "condition.collapsed")  # the embedding cannot vary
#: Scale-free bounds; none is a number measured on a particular pipeline. The logits' own floor comes
#: from the pipeline in front (`Sensitivity.floor`: 8 eps of the logits' dtype, or ten times what the
#: same captions move them by run to run), and every bound on the logits is a multiple of it.
MOVES = 1e-3  # an embedding that changes by 1/1000 of its norm has moved (relative distance, any scale)
RESPONDS = 100.0  # logits that move 100x their floor respond to the caption
WAKES = 10.0  # after a few updates a zero-initialised gate moves the logits 10x their floor at least
EXPECTED_CHANGES = 5.0  # generated tokens the caption's effect predicts should differ before identical
# outputs count as evidence (independent draws: P(all identical) <= e^-5 < 1%)


def _blocked(prior: list[Finding] | None) -> list[str]:
    return sorted({f.id for f in prior or [] if f.id in UPSTREAM and f.severity.value == "error"})


def _pair_distances(b: ConditionBatch) -> tuple[list[float], int, int]:
    """Relative distances |E_i - E_j| / mean(|E_i|, |E_j|) over the positions real in both, for every pair of
    kept rows with different condition tokens; and how many such rows there are, and how many are all zero."""
    E = b.embedding
    if E is None or b.ids is None or len(E) != len(b.captions):
        return [], 0, 0
    valid = (b.mask if b.mask is not None and b.mask.shape == E.shape[:2] else np.ones(E.shape[:2], dtype=bool))
    kept = [i for i in range(len(E)) if (b.dropped is None or not b.dropped[i]) and valid[i].any()]
    rows = list({tuple(b.ids[i].tolist()): i for i in kept}.values())  # one row per distinct token row
    zero = sum(1 for i in rows if not np.abs(E[i][valid[i]]).max() > 0)
    out = []
    for a, i in enumerate(rows):
        for j in rows[a + 1:]:
            both = valid[i] & valid[j]
            if E.shape[1] == 1 or not both.any():
                both = np.ones(E.shape[1], dtype=bool) if E.shape[1] == 1 else both
            x, y = E[i][both], E[j][both]
            scale = (np.linalg.norm(x) + np.linalg.norm(y)) / 2
            if scale > 0:
                out.append(float(np.linalg.norm(x - y) / scale))
    return out, len(rows), zero


def _within_distances(b: ConditionBatch, limit: int = 8) -> list[float]:
    """Relative distances between successive real positions of one kept row (the pipeline's own scale of
    how much its embedding varies), for up to `limit` rows."""
    E = b.embedding
    if E is None or E.ndim != 3 or E.shape[1] < 2:
        return []
    valid = b.mask if b.mask is not None and b.mask.shape == E.shape[:2] else np.ones(E.shape[:2], dtype=bool)
    out = []
    for i in range(min(len(E), limit)):
        if b.dropped is not None and i < len(b.dropped) and b.dropped[i]:
            continue
        x = E[i][valid[i]]
        for a, c in zip(x[:-1], x[1:]):
            scale = (np.linalg.norm(a) + np.linalg.norm(c)) / 2
            if scale > 0:
                out.append(float(np.linalg.norm(a - c) / scale))
    return out


def judge_collapse(data: ConditionData, prior: list[Finding] | None = None) -> list[Finding]:
    """Different captions must give different condition embeddings (compared position by position)."""
    if _blocked(prior):
        return []
    distances: list[float] = []
    considered = zero = 0
    for b in data.batches:
        d, n, z = _pair_distances(b)
        distances += d
        considered += n
        zero += z
    if considered >= 3 and zero == considered:
        return [make("condition.collapsed", "error", "condition.embedding",
                     f"the condition embedding is all zeros for every one of {considered} distinct captions", CHECK,
                     hint="the encoder output is masked or multiplied away; print the embedding of one caption",
                     distinct_captions=considered)]
    if len(distances) < 3 or float(np.median(distances)) >= MOVES:
        return []
    within = [d for b in data.batches for d in _within_distances(b)]
    spread = float(np.median(within)) if within else None
    if spread is None:
        contrast = ""
    elif spread >= 10 * float(np.median(distances)):
        contrast = (f", while the positions within one caption differ by {spread:.2g} (median): the embedding varies, "
                    "but not with the caption")
    else:
        contrast = f"; the positions within one caption barely differ either ({spread:.2g}): a constant embedding"
    return [make("condition.collapsed", "error", "condition.embedding",
                 f"different captions give the same condition embedding: relative distance between rows median "
                 f"{np.median(distances):.1e}, largest {max(distances):.1e} over {len(distances)} pairs of distinct "
                 f"captions{contrast}", CHECK,
                 hint="look for a reduction over the batch axis (mean(dim=0) where dim=1 was meant), a cached or "
                      "constant embedding, or an encoder whose output ignores its input ids",
                 median_distance=float(np.median(distances)), max_distance=max(distances), pairs=len(distances),
                 within_caption=spread)]


def _floor(s: Sensitivity) -> float:
    return s.floor


def caption_sensitive(s: Sensitivity | None) -> bool:
    """Whether the logits respond to the caption at all (above their own floor)."""
    return (
        s is not None and s.error is None and any(v > _floor(s) for v in s.logits_change.values() if math.isfinite(v))
    )


def fusion_silent(s: Sensitivity | None) -> bool:
    """The embedding moved with the caption but the logits did not move beyond their floor."""
    if s is None or s.error is not None or s.rows == 0:
        return False
    moved = [k for k, v in s.logits_change.items() if math.isfinite(v) and s.embedding_change.get(k, 1.0) > MOVES]
    return bool(moved) and max(s.logits_change[k] for k in moved) <= _floor(s)


def judge_sensitivity(
    s: Sensitivity, prior: list[Finding] | None = None, trained: Sensitivity | None = None
) -> list[Finding]:
    """The embedding changes with the caption; the logits must change too, or the fusion ignores it.

    "Change" is judged against the pipeline's own floor (`Sensitivity.floor`): the logits' dtype
    precision and their run-to-run change with the same captions. `trained`: the same measurement
    after a few updates. A fusion whose gate starts at zero ignores the condition at initialisation
    by design and responds once trained; a broken one never does.
    """
    if s.error is not None or s.rows == 0 or _blocked(prior):
        return []
    floor = _floor(s)
    responds = trained is not None and any(v > WAKES * _floor(trained) for v in trained.logits_change.values()
                                           if math.isfinite(v))
    if fusion_silent(s) and trained is not None and responds:
        return [
            make(
                "condition.unused",
                "info",
                "logits",
                f"a fresh model's logits ignore the caption but respond after {trained.steps} updates (logit change "
                f"{max(trained.logits_change.values()):.2g}, {WAKES:.0f}x above their floor "
                f"{_floor(trained):.1g}): a fusion gate that starts at zero, as designed",
                CHECK,
                logits_change=trained.logits_change,
                floor=_floor(trained),
            )
        ]
    emb = {k: v for k, v in s.embedding_change.items() if math.isfinite(v)}
    # Only alternatives whose embedding moved say anything about the fusion (no embedding tap: assume it moved).
    logit = {k: v for k, v in s.logits_change.items() if math.isfinite(v) and emb.get(k, 1.0) > MOVES}
    if not logit:
        return []  # the embedding itself did not move: the earlier stages speak for that
    told = "; ".join(f"{k}: embedding {100 * emb[k]:.0f}%, logits {v:.2g}" if k in emb else f"{k}: logits {v:.2g}"
                     for k, v in logit.items())
    control = (f"; the same captions set again move them {s.control:.1g}" if math.isfinite(s.control) else "")
    ev = {"embedding_change": emb, "logits_change": logit, "rows": s.rows, "floor": floor, "control": s.control,
          "upcast_from": s.upcast_from}
    if s.upcast_from:  # measured on the float32 twin of a low-precision run
        control += f"; the run's {s.upcast_from} ops measured in float32"
    if max(logit.values()) <= floor:
        return [make("condition.unused", "error", "logits",
                     f"replacing the caption changes the condition embedding but not the logits ({told}; relative "
                     f"changes over {s.rows} rows, at or below the logits' floor {floor:.1g}{control}): the model does "
                     "not use the condition tensor", CHECK,
                     hint="follow the embedding into the fusion: an inverted attention/key-padding mask (True meaning "
                          "'ignore' in one API and 'attend' in another), a condition that is never passed to the "
                          "blocks, or a gate initialised and kept at zero", **ev)]
    other, null = logit.get("other caption"), logit.get("null caption")
    if other is not None and null is not None and other <= floor and null > RESPONDS * floor:
        return [make("condition.unused", "warning", "logits",
                     f"the logits react to removing the caption but not to replacing it by another ({told}; floor "
                     f"{floor:.1g}): the model uses whether a condition is present, not what it says", CHECK,
                     hint="the fusion reads only the condition mask or a per-batch summary; check what reaches the "
                          "cross-attention keys and values", **ev)]
    return []


def _names(params: list[CondParam]) -> str:
    """The top-level modules these tensors belong to, with counts: "text_encoder ×17, null_cond"."""
    counts: dict[str, int] = {}
    for q in params:
        top = q.name.split(".", 1)[0]
        counts[top] = counts.get(top, 0) + 1
    return ", ".join(f"{m} ×{n}" if n > 1 else m for m, n in counts.items())


def _frozen_finding(g: ConditionGrads, frozen: list[CondParam]) -> Finding:
    """Frozen conditioning tensors: an error only with evidence that they were never trained.

    The evidence is their 1-D biases and norm gains: still constant, as initialised (≥ half of
    them), they never learnt. Frozen tensors whose gains moved look pretrained, and freezing a
    pretrained path is a recipe (MusicGen's frozen T5; LoRA or head-only fine-tuning, which freeze
    the whole path, fusion included): `info`. A whole path frozen without a gain to read cannot be
    told apart: a warning that says so.
    """
    gains = [q for q in frozen if q.ndim == 1]
    untouched = [q for q in gains if q.constant]
    share = sum(q.numel for q in frozen) / sum(q.numel for q in g.params)
    whole = len(frozen) == len(g.params)
    what = f"{len(frozen)} conditioning tensors ({100 * share:.0f}% of its values: {_names(frozen)})"
    names = [q.name for q in frozen][:30]
    if gains and len(untouched) >= 0.5 * len(gains):
        scope = "the whole conditioning path, fusion included, is frozen and " if whole else ""
        return make("condition.encoder_frozen", "error", "condition.embedding",
                    f"{what} have requires_grad=False and {scope}{len(untouched)} of its {len(gains)} frozen biases "
                    "and norm gains are still constant, as initialised: it was never trained", CHECK,
                    hint="freeze only a pretrained encoder (MusicGen's T5); one trained from scratch must learn: "
                         "remove the requires_grad_(False) copied from a pretrained recipe",
                    frozen=names, constant=len(untouched), gains=len(gains), share=share, whole_path=whole)
    if whole and not gains:
        return make("condition.encoder_frozen", "warning", "condition.embedding",
                    f"{what} have requires_grad=False: the whole conditioning path, fusion included, is frozen, and "
                    "it has no bias or norm gain to tell a pretrained path from one never trained", CHECK,
                    hint="fine when the path is pretrained (adapter or head-only fine-tuning); if it was initialised "
                         "for this run, let it train",
                    frozen=names, constant=0, gains=0, share=share, whole_path=True)
    scope = ("the whole conditioning path is frozen, fusion included, and looks pretrained: the model keeps the "
             "caption response it learnt (adapter, LoRA or head-only fine-tuning)" if whole else
             "they look pretrained")
    return make("condition.encoder_frozen", "info", "condition.embedding",
                f"{what} are frozen; {scope} ({len(gains) - len(untouched)} of {len(gains)} biases and norm gains "
                "moved from their initial values)", CHECK,
                hint="expected for a frozen pretrained text encoder", frozen=names, constant=len(untouched),
                gains=len(gains), share=share, whole_path=whole)


def judge_condition_grads(g: ConditionGrads, prior: list[Finding] | None = None) -> list[Finding]:
    """Frozen at initialisation, computed without autograd, or cut from the loss. A condition the
    fusion does not use (`condition.unused` in `prior`) gets no gradient as a consequence."""
    if not g.params:
        return []
    out: list[Finding] = []
    frozen = [q for q in g.params if not q.requires_grad]
    if frozen:
        out.append(_frozen_finding(g, frozen))
    if not g.loss_has_graph:
        return out
    cut = [q for q in g.params if q.grad == "none"]
    if not cut:
        return out
    if g.embedding_requires_grad is False:
        out.append(make("condition.no_grad", "error", "condition.embedding",
                        f"condition.embedding has requires_grad=False although {len(cut)} trainable tensors of the "
                        f"conditioning path ({_names(cut)}) should produce it: it is computed without autograd", CHECK,
                        hint="the encoder runs under torch.no_grad() (or its output is detached); use "
                             "torch.set_grad_enabled(finetune) so a trainable encoder keeps its graph",
                        parameters=[q.name for q in cut][:30]))
    elif g.embedding_requires_grad and g.embedding_grad == "none" and any(
            f.id == "condition.unused" and f.severity.value == "error" for f in prior or []):
        pass  # the logits do not use the condition, so no gradient comes back: condition.unused says so
    elif g.embedding_requires_grad and g.embedding_grad == "none":
        out.append(make("condition.no_grad", "error", "grad",
                        f"condition.embedding has a graph but the loss sends it no gradient: {len(cut)} conditioning "
                        f"tensors ({_names(cut)}) get none — the fusion uses a detached copy of it", CHECK,
                        hint="look for cond.detach() (or a cached condition) where the model builds its keys/values; "
                             "detach only in the generation path, never when training",
                        parameters=[q.name for q in cut][:30]))
    else:
        out.append(make("condition.no_grad", "warning", "grad",
                        f"{len(cut)} trainable conditioning tensors get no gradient ({_names(cut)})", CHECK,
                        hint="they are not on the path from the condition to the loss: unused, or cut by a detach",
                        parameters=[q.name for q in cut][:30]))
    return out


def expected_changes(p: GuidanceProbe, s: Sensitivity | None) -> float | None:
    """How many generated tokens the caption's effect on a fresh model predicts should differ between the
    true and the empty caption under the same random draws: tokens sampled x the mean total-variation
    distance of the predicted distributions (at guidance 1). None when either is unknown."""
    if s is None or p.sampled is None:
        return None
    tv = s.tv.get("null caption", s.tv.get("other caption"))
    return float(p.sampled * tv) if tv is not None and math.isfinite(tv) else None


def judge_guidance(p: GuidanceProbe, s: Sensitivity | None) -> list[Finding]:
    """The model responds to the caption, so generation with the configured sampling must too.

    Identical outputs only count when the caption's measured effect predicts that some generated
    tokens should differ (`expected_changes` >= EXPECTED_CHANGES): a fresh model whose cross-attention
    barely moves its predictions samples the same tokens for any caption, as it should."""
    if p.error is not None or not p.changed or not caption_sensitive(s):
        return []
    null, other = p.changed.get("null caption", 1.0), p.changed.get("other caption", 1.0)
    if null > 0 or other > 0:
        return []
    plain = p.changed.get("null caption, guidance 1")
    what = (f"{p.tokens} generated tokens are" if p.compared == "codes" else
            f"the generated audio ({p.tokens} samples) is")
    expect = expected_changes(p, s)
    if plain is not None and plain == 0 and (expect is None or expect < EXPECTED_CHANGES):
        size = (f"the caption's effect on the fresh model's predictions (total variation "
                f"{s.tv.get('null caption', float('nan')):.2g} per token) predicts only {expect:.2g} changed tokens of "
                f"{p.sampled}" if expect is not None else "how many tokens it should change is unknown "
                "(the number of sampled tokens or the predictions' change was not measured)")
        return [make("condition.unused", "info", "generation",
                     f"{what} identical for the true, another and the empty caption, even with guidance 1, but "
                     f"that is no evidence here: {size}", CHECK,
                     hint="judge it after some training, when the condition moves the predictions more (or with more "
                          "frames: --budget full)", expected_changes=expect, sampled=p.sampled)]
    if plain is not None and plain == 0:
        return [
            make(
                "condition.unused",
                "error",
                "generation",
                f"generation ignores the caption: {what} identical for the true, another and the empty "
                f"caption, even with guidance 1, although the model's predictions depend on it (about {expect:.0f} "
                "tokens should differ)",
                CHECK,
                hint="the generation path does not pass the caption to the model (empty or cached conditions)",
                tokens=p.tokens,
                expected_changes=expect,
            )
        ]
    if plain is None:
        detail = f"(forcing guidance 1 failed: {p.override_error})"
        severity = "warning" if expect is not None and expect >= EXPECTED_CHANGES else "info"
    else:
        detail = f"while with guidance 1 the empty caption changes {100 * plain:.0f}% of them"
        # Evidence whatever the expected count: with the same random draws, guidance above 1 amplifies the
        # caption's effect, so where guidance 1 changes a token the configured sampling should too.
        severity = "error"
    return [make("generation.guidance_off", severity, "generation",
                 f"with the configured sampling, {what} identical for the true, another and "
                 f"the empty caption {detail}: the guidance coefficient cancels the condition", CHECK,
                 hint="in AudioCraft's uncond + cfg_coef * (cond - uncond), 0 keeps only the unconditional logits and "
                      "1 means no guidance (diffusers' 'guidance 0 = off' does not carry over); use about 3",
                 tokens=p.tokens, changed=p.changed, expected_changes=expect)]
