"""Judge whether the codec tokens describe their audio: decodes against the audio they were made from
(a stale token cache, a wrong codebook order)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from .base import make

__all__ = ["judge_token_audio", "resolution"]

CHECK = "checks.stale"  # the name these findings have always carried

#: The chance that a codec which cannot tell the examples apart still ranks this many own pairings
#: above every wrong pairing (a rank test: no constant of any one codec).
RESOLVE_P = 0.05
#: ... and each such pairing stands this many robust deviations above the wrong pairings' median.
RESOLVE_Z = 3.0


def _chance(sims: np.ndarray) -> tuple[float, float, float]:
    """(median, robust spread, max) of the wrong pairings: what this codec scores by chance."""
    off = sims[~np.eye(len(sims), dtype=bool)]
    med = float(np.median(off))
    mad = 1.4826 * float(np.median(np.abs(off - med)))
    spread = mad if mad > 0 else float(off.std()) or 1e-9
    return med, spread, float(off.max())


def _tail(n: int, t: int) -> float:
    """P(the top t of n·n pairings are all own ones) when own and wrong pairings score alike."""
    total, p = n * n, 1.0
    for i in range(t):
        p *= (n - i) / (total - i)
    return p


def resolution(own: list[float], sims: np.ndarray) -> dict[str, Any]:
    """Does this codec tell examples apart? The own pairings that beat every wrong pairing by a clear
    margin, and the chance of that many doing so if decodes matched their audio no better than others'."""
    med, spread, top = _chance(sims)
    resolved = [i for i, x in enumerate(own) if x > top and (x - med) / spread >= RESOLVE_Z]
    p = _tail(len(own), len(resolved)) if resolved else 1.0
    return {"chance": med, "chance_spread": spread, "chance_max": top, "resolved": resolved, "p": p,
            "resolves": bool(resolved) and p <= RESOLVE_P,
            "ceiling": float(np.median([own[i] for i in resolved])) if resolved else None}


def judge_token_audio(m: dict[str, Any] | None) -> list[Finding]:
    """Decoded tokens must sound like the audio they were made from, best in the given codebook order.

    No level is assumed: the baseline is this codec's own. A wrong pairing (example i's decode
    against example j's audio) is what the codec scores by chance; the codec *resolves* when enough
    own pairings beat every wrong one (`resolution`). Then its fresh level is the median of those,
    and an example whose own pairing sits nearer chance than that level is not paired with its audio.
    A codec that does not resolve in any codebook order cannot tell a stale token from a fresh one:
    that is said (info), not judged.
    """
    if not m:
        return []
    sims = np.asarray(m.get("sims") or [], dtype=np.float64)
    if sims.ndim != 2 or len(sims) < 2:
        return []
    own, examples = list(m["own"]), m["examples"]
    identity, best, best_score = m["identity"], m["best_perm"], m["best_perm_score"]
    given = resolution(own, sims)
    chance = given["chance"]
    ev = {"similarity_own": own, "similarity_others": m["others_mean"], "identity": identity,
          "best_permutation": best, "best_permutation_score": best_score, "chance": chance,
          "chance_max": given["chance_max"], "resolved": [examples[i] for i in given["resolved"]],
          "resolution_p": given["p"]}
    if best != sorted(best):
        best_sims = np.asarray(m.get("best_perm_sims") or sims, dtype=np.float64)
        reordered = resolution(list(m.get("best_perm_own") or own), best_sims)
        # The reordered codes resolve, and the given order sits nearer chance than they do.
        if reordered["resolves"] and identity - chance < 0.5 * (best_score - chance):
            return [make("tokens.codebook_order", "error", "tokens",
                         f"decoding the tokens with codebooks reordered as {best} matches the audio far better "
                         f"(spectral similarity {best_score:.2f}) than in their given order ({identity:.2f}; "
                         f"a wrong pairing of decode and audio scores {chance:.2f} with this codec)", CHECK,
                         hint="codes are laid out [B, K, T] with codebook 0 the coarsest; check the permute/transpose "
                              "after encoding (and before decoding)", **ev)]
    if not given["resolves"]:
        return [
            make(
                "tokens.audio_unjudged",
                "info",
                "tokens",
                f"this codec's decodes do not tell the examples apart (own pairings {[round(x, 2) for x in own]} "
                f"against wrong pairings around {chance:.2f}, up to {given['chance_max']:.2f}): whether the tokens "
                "describe their audio (a stale cache, the codebook order) cannot be judged",
                CHECK,
                hint="expected for an untrained or toy codec; with a real codec, look at the decode path "
                "(`signalchain listen`) and the token cache",
                **ev,
            )
        ]
    level = given["ceiling"]
    cut = chance + 0.5 * (level - chance)
    poor = [examples[i] for i, x in enumerate(own) if x < cut]
    if len(poor) >= 2 and len(poor) >= len(own) // 4:
        return [make("loader.stale_cache", "error", "tokens",
                     f"decoded, the tokens of examples {poor} do not sound like the audio they are paired with "
                     f"(spectral similarity {[round(x, 2) for x in own]}; fresh codes of this codec score about "
                     f"{level:.2f} here, a wrong pairing {chance:.2f})", CHECK,
                     hint="the tokens were made from other audio: a cache built for another crop, codec or "
                          "clip; key the cache by all of them or recompute the tokens", fresh_level=level,
                     threshold=cut, **ev)]
    return []
