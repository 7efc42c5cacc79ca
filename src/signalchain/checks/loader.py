"""Judge the training loader: batches that repeat, or a token cache that ignores the crop."""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from .base import make

__all__ = ["judge_loader"]

CHECK = "checks.stale"  # the name these findings have always carried
#: A loader showing fewer distinct examples than this share of what it could show is cycling.
REPEAT_SHARE = 0.5


def judge_loader(m: dict[str, Any]) -> list[Finding]:
    batches = m.get("batches", [])
    if len(batches) < 2:
        return []
    same = [i for i in range(1, len(batches)) if batches[i]["batch"] == batches[i - 1]["batch"]]
    if same:
        return [
            make(
                "loader.repeats",
                "error",
                "loader",
                f"the loader yields the same batch again: batches {[(i - 1, i) for i in same]} "
                f"of {len(batches)} are identical",
                CHECK,
                hint="the iterator is re-created every step or returns a cached batch; draw a new batch "
                "each step from one iterator",
                identical_pairs=same,
                batches=len(batches),
            )
        ]
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
        # A sampler that visits every example before repeating one (or draws with replacement) shows
        # at least ~0.63 of min(split size, draws) distinct examples; fewer than half is a cycle over
        # a handful. Without the split's size, the draws are the bound.
        size = m.get("train_size")
        capacity = min(len(examples), size) if size else len(examples)
        distinct = len(set(examples))
        share = 1 - distinct / len(examples)
        # The loader shows far fewer examples than it could, or it cycles over a handful of them
        # (a tiny set seen epoch after epoch: most draws are repeats).
        if distinct < REPEAT_SHARE * capacity or share > REPEAT_SHARE:
            return [make("loader.repeats", "warning", "loader",
                         f"{len(batches)} consecutive batches hold {distinct} distinct examples in {len(examples)} "
                         f"draws ({100 * share:.0f}% repeats"
                         + (f"; the training split lists {size}" if size else "") + ")",
                         CHECK, hint="the sampler cycles over a handful of items: check the dataset size and sampler",
                         repeated_share=share, examples=len(examples), distinct=distinct, train_size=size)]
    return []
