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
        return [_repeats(batches, same)]
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
    return _judge_repeats(batches, m.get("train_size"))


def _runs(batches: list[dict[str, Any]]) -> list[int]:
    """Lengths of the runs of identical consecutive batches."""
    runs = [1]
    for a, b in zip(batches, batches[1:]):
        if a["batch"] == b["batch"]:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def _repeats(batches: list[dict[str, Any]], same: list[int]) -> Finding:
    """Identical consecutive batches. Their pattern says where to look: one batch over and over is
    an iterator re-created (or a cached batch); new content arriving every k batches, in runs of k
    identical ones, is k loader workers drawing from one copied random state."""
    runs = _runs(batches)
    whole = runs[:-1] if len(runs) > 2 else runs  # the last run may be cut by the measurement's end
    k = whole[0]
    periodic = len(runs) >= 2 and k >= 2 and all(r == k for r in whole) and runs[-1] <= k
    told = (f"the loader yields the same batch again: batches {[(i - 1, i) for i in same]} of {len(batches)} are "
            "identical")
    if periodic:
        message = (told + f", in runs of {k} (new content every {k} batches): the pattern of {k} DataLoader workers "
                   "that each draw the same random numbers")
        hint = (f"the workers share one random state: a generator the dataset holds (`self.rng = "
                f"np.random.default_rng(seed)`, random.Random, a torch.Generator) is copied into each of the {k} "
                "workers unchanged; reseed it per worker in `worker_init_fn` from "
                "`torch.utils.data.get_worker_info().seed` (PyTorch reseeds only the global numpy/random state)")
    else:
        message = told
        hint = ("the iterator is re-created every step or returns a cached batch; draw a new batch each step from "
                "one iterator")
    return make("loader.repeats", "error", "loader", message, CHECK, hint=hint, identical_pairs=same,
                batches=len(batches), runs=runs, period=k if periodic else None)


def _judge_repeats(batches: list[dict[str, Any]], size: int | None) -> list[Finding]:
    """Repeats judged against what the split's size and the number of draws imply.

    A sampler that visits every example before repeating one (or draws with replacement) shows at
    least ~0.63 of min(split size, draws) distinct examples; fewer than half is a cycle over a
    handful, or a split that lists copies. A small split drawn more often than it has examples
    repeats by design: epochs over ten clips are how a small fine-tune trains (info). The fault is a
    loader whose every batch holds the same examples (only their order and crops change).
    """
    examples = [h for b in batches for h in b["examples"]]
    if not examples:
        return []
    draws, distinct = len(examples), len(set(examples))
    share = 1 - distinct / draws
    told = (f"{len(batches)} consecutive batches hold {distinct} distinct examples in {draws} draws "
            f"({100 * share:.0f}% repeats" + (f"; the training split lists {size}" if size else "") + ")")
    ev = {"repeated_share": share, "examples": draws, "distinct": distinct, "train_size": size}
    if size and distinct < REPEAT_SHARE * min(draws, size):
        return [make("loader.repeats", "warning", "loader", told, CHECK,
                     hint="the sampler cycles over a handful of items, or the split lists copies of a few: check "
                          "the dataset's rows against its files and the sampler's indices", **ev)]
    first = set(batches[0]["examples"])
    if len(first) > 1 and all(set(b["examples"]) == first for b in batches[1:]):
        return [make("loader.repeats", "warning", "loader",
                     f"every one of {len(batches)} batches holds the same {len(first)} examples, only reordered or "
                     "cropped anew" + (f" (the training split lists {size})" if size else "")
                     + ": each update trains on one set of clips", CHECK,
                     hint="a batch that covers the whole split: a debug subset left in (max_train_samples, "
                          "train_size), or a sampler re-created every step over a few items; check the split's size",
                     same_set=len(first), **ev)]
    if not size and distinct < REPEAT_SHARE * draws:
        return [make("loader.repeats", "info", "loader", told + ": without the split's size (no splits(), no "
                     "loader.dataset) a small split seen epoch after epoch cannot be told from a sampler cycling over "
                     "part of a larger one", CHECK,
                     hint="give the pipeline splits() (or a loader with .dataset) so the repeats are judged", **ev)]
    if size and draws > size and share > REPEAT_SHARE:
        return [make("loader.repeats", "info", "loader",
                     f"{told}: {draws / size:.1f} epochs of a small split, as a small fine-tune draws it; a long run "
                     "on it can memorise (the generation family checks)", CHECK,
                     hint="nothing to change for a small fine-tune; more clips (or augmentation) if generation replays "
                          "training clips", **ev)]
    return []
