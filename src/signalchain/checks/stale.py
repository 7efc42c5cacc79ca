"""Judge staleness: repeated batches, predictions that ignore their input, tokens that are not the audio's."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from .base import make

__all__ = ["judge_loader", "judge_predictions", "judge_token_audio"]

CHECK = "checks.stale"


def judge_loader(m: dict[str, Any]) -> list[Finding]:
    batches = m.get("batches", [])
    if len(batches) < 2:
        return []
    same = [i for i in range(1, len(batches)) if batches[i]["batch"] == batches[i - 1]["batch"]]
    if same:
        return [make("loader.repeats", "error", "loader",
                     f"the loader yields the same batch again: batches {[(i - 1, i) for i in same]} of {len(batches)} are identical",
                     CHECK, hint="the iterator is re-created every step or returns a cached batch; draw a new batch "
                                 "each step from one iterator", identical_pairs=same, batches=len(batches))]
    examples = [h for b in batches for h in b["examples"]]
    if examples:
        repeated = len(examples) - len(set(examples))
        share = repeated / len(examples)
        if share > 0.5:
            return [make("loader.repeats", "warning", "loader",
                         f"{100 * share:.0f}% of the examples in {len(batches)} consecutive batches are repeats",
                         CHECK, hint="the sampler cycles over a handful of items: check the dataset size and sampler",
                         repeated_share=share, examples=len(examples))]
    return []


def judge_predictions(m: dict[str, Any]) -> list[Finding]:
    g, o = m.get("golden", {}), m.get("other", {})
    if not g.get("logits") or not o.get("logits"):
        return []
    if g["logits"] == o["logits"] and g.get("tokens") != o.get("tokens"):
        return [make("loss.stale_predictions", "error", "logits",
                     "two different batches (different tokens) get identical logits from the same model", CHECK,
                     hint="predictions are cached or reused across steps: the loss is computed on stale logits")]
    return []


def judge_token_audio(m: dict[str, Any] | None) -> list[Finding]:
    """Decoded tokens must sound like the audio they were made from, best in the given codebook order."""
    if not m:
        return []
    identity, best, best_score = m["identity"], m["best_perm"], m["best_perm_score"]
    own = np.array(m["own"])
    ev = {"similarity_own": m["own"], "similarity_others": m["others_mean"], "identity": identity,
          "best_permutation": best, "best_permutation_score": best_score}
    if best != sorted(best) and best_score - identity > 0.2:
        return [make("tokens.codebook_order", "error", "tokens",
                     f"decoding the tokens with codebooks reordered as {best} matches the audio far better "
                     f"(spectral similarity {best_score:.2f}) than in their given order ({identity:.2f})", CHECK,
                     hint="codes are laid out [B, K, T] with codebook 0 the coarsest; check the permute/transpose "
                          "after encoding (and before decoding)", **ev)]
    beaten = m.get("own_beaten", 0)
    if identity < 0.4 or beaten >= max(2, len(own) // 4):
        return [make("loader.stale_cache", "error", "tokens",
                     f"the tokens do not describe the audio they are paired with: decoded, they match it with "
                     f"similarity {identity:.2f} (another example's audio matches as well for {beaten} of {len(own)})",
                     CHECK, hint="tokens come from a cache that is stale (other crop, other codec, other clip) or are "
                                 "paired with the wrong audio; recompute them from the audio of this batch", **ev)]
    return []
