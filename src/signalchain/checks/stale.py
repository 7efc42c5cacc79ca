"""Judge staleness: repeated batches, predictions that ignore their input, tokens that are not the audio's."""

from __future__ import annotations

from typing import Any

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
    stale = []
    for visits in m.get("revisits", []):
        for a, b in zip(visits, visits[1:]):
            if a["crop"] != b["crop"] and a["tokens"] == b["tokens"]:
                stale.append((a, b))
    if stale:
        a, b = stale[0]
        return [make("loader.stale_cache", "error", "tokens",
                     f"{len(stale)} clips came back with a different crop ({a['crop']} → {b['crop']}) but exactly the "
                     "same tokens: the tokens are served from a cache that ignores the crop", CHECK,
                     hint="key the token cache by everything that changes the audio (clip, crop start and length, "
                          "resampling, codec version) or recompute tokens", revisits=len(m.get("revisits", [])),
                     stale=len(stale), example=[a, b])]
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
    ev = {"similarity_own": m["own"], "similarity_others": m["others_mean"], "identity": identity,
          "best_permutation": best, "best_permutation_score": best_score}
    if best != sorted(best) and best_score - identity > 0.2:
        return [make("tokens.codebook_order", "error", "tokens",
                     f"decoding the tokens with codebooks reordered as {best} matches the audio far better "
                     f"(spectral similarity {best_score:.2f}) than in their given order ({identity:.2f})", CHECK,
                     hint="codes are laid out [B, K, T] with codebook 0 the coarsest; check the permute/transpose "
                          "after encoding (and before decoding)", **ev)]
    own = m["own"]
    poor = [i for i, x in zip(m["examples"], own) if x < 0.4]
    if len(poor) >= 2 and len(poor) >= len(own) // 4:
        return [make("loader.stale_cache", "error", "tokens",
                     f"decoded, the tokens of examples {poor} do not sound like the audio they are paired with "
                     f"(spectral similarity {[round(x, 2) for x in own]}; fresh codes of this codec score about 0.8)",
                     CHECK, hint="the tokens were made from other audio: a cache built for another crop, codec or "
                                 "clip; key the cache by all of them or recompute the tokens", **ev)]
    return []
