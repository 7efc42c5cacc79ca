"""Judges of leaks through processing: normalisation statistics fitted on evaluation data, a
training sampler that draws evaluation examples, an evaluation loader that serves training
examples (a cache or index built before the split). Pure: evidence in, findings out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..checks.base import make
from ..findings import Finding
from ..records.audit import STAGE_SPLIT

__all__ = ["SplitStats", "FittedStats", "SamplerEvidence", "LoaderEvidence", "judge_norm_stats",
           "judge_sampler", "judge_loaders"]

CHECK = "audit.leaks"


@dataclass
class SplitStats:
    """Running sums of one split's mono samples (float64)."""

    samples: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    clips: int = 0
    clip_means: float = 0.0  # sum of per-clip means

    def add(self, samples: int, total: float, total_sq: float) -> None:
        if samples > 0:
            self.samples += samples
            self.total += total
            self.total_sq += total_sq
            self.clips += 1
            self.clip_means += total / samples

    def merged(self, other: SplitStats) -> SplitStats:
        return SplitStats(self.samples + other.samples, self.total + other.total, self.total_sq + other.total_sq,
                          self.clips + other.clips, self.clip_means + other.clip_means)

    def figures(self) -> dict[str, float]:
        n = max(self.samples, 1)
        mean = self.total / n
        return {"mean": mean, "std": math.sqrt(max(self.total_sq / n - mean * mean, 0.0)),
                "clip_mean": self.clip_means / max(self.clips, 1), "samples": float(self.samples),
                "clips": float(self.clips)}


@dataclass
class FittedStats:
    """Statistics a pipeline normalises with: read from a file or recovered from its taps."""

    source: str  # where they come from, for the message
    mean: float | None = None
    std: float | None = None
    count: int | None = None  # samples or clips they were fitted on, when stated
    uncertainty: float = 0.0  # absolute, on the mean and std


def judge_norm_stats(fitted: FittedStats, stats: Mapping[str, SplitStats], train: str) -> list[Finding]:
    """Do the statistics match the training split's, or those of all splits together?"""
    if train not in stats or len(stats) < 2:
        return []
    everything = SplitStats()
    for s in stats.values():
        everything = everything.merged(s)
    tr, al = stats[train].figures(), everything.figures()
    tol = max(fitted.uncertainty, 1e-7 * max(al["std"], 1e-12))
    votes: dict[str, list[str]] = {"all": [], "train": []}
    numbers = {}
    for name, value, keys in (("mean", fitted.mean, ("mean", "clip_mean")), ("std", fitted.std, ("std",))):
        if value is None or not math.isfinite(value):
            continue
        d_tr = min(abs(value - tr[k]) for k in keys)
        d_al = min(abs(value - al[k]) for k in keys)
        numbers[name] = {"fitted": value, "train": tr[keys[0]], "all": al[keys[0]]}
        if abs(tr[keys[0]] - al[keys[0]]) <= 4 * tol:
            continue  # the two candidates are indistinguishable at this precision
        if d_al < 0.1 * d_tr:
            votes["all"].append(name)
        elif d_tr < 0.1 * d_al:
            votes["train"].append(name)
    if fitted.count is not None:
        if fitted.count in (int(al["samples"]), int(al["clips"])) and fitted.count not in (
            int(tr["samples"]),
            int(tr["clips"]),
        ):
            votes["all"].append("count")
        elif fitted.count in (int(tr["samples"]), int(tr["clips"])):
            votes["train"].append("count")
    if votes["all"] and not votes["train"]:
        shown = "; ".join(f"{k} {v['fitted']:.6g} = all splits' {v['all']:.6g}, not {train}'s {v['train']:.6g}"
                          for k, v in numbers.items() if k in votes["all"])
        return [make("split.norm_fitted_on_all", "warning", STAGE_SPLIT,
                     f"the normalisation statistics ({fitted.source}) were fitted on every split, evaluation "
                     f"included: {shown or 'count = ' + str(fitted.count)}", CHECK,
                     hint=f"fit the statistics on {train} only and apply them unchanged to the other splits",
                     matched=votes["all"], figures=numbers, fitted_count=fitted.count)]
    if not votes["train"] and numbers:
        return [make("split.norm_fitted_on_all", "info", STAGE_SPLIT,
                     f"the normalisation statistics ({fitted.source}) match neither {train} nor all splits: "
                     f"{numbers}", CHECK, hint="they may be fitted at another rate or on features; "
                     "check by hand that only training data went into them", figures=numbers)]
    return []


@dataclass
class SamplerEvidence:
    source: str  # "--sampler FILE" or "loader('train')"
    drawn: int  # examples looked at
    hits: dict[str, list[str]] = field(default_factory=dict)  # eval split -> refs the sampler draws
    beyond: list[int] = field(default_factory=list)  # indices past the end of the training split
    train_size: int = 0


def judge_sampler(ev: SamplerEvidence) -> list[Finding]:
    out = []
    for split, refs in ev.hits.items():
        if refs:
            out.append(make("split.sampler_includes_eval", "error", STAGE_SPLIT,
                            f"{ev.source} draws {len(refs)} {split} examples among {ev.drawn} looked at, e.g. "
                            f"{', '.join(refs[:3])}", CHECK,
                            hint="build the sampler over the training subset's indices, not the whole dataset",
                            split=split, refs=refs[:1000], drawn=ev.drawn))
    if ev.beyond:
        out.append(make("split.sampler_includes_eval", "error", STAGE_SPLIT,
                        f"{ev.source} holds {len(ev.beyond)} indices ≥ {ev.train_size}, the training split's size "
                        f"(max {max(ev.beyond)}): it indexes the unsplit dataset", CHECK,
                        hint="build the sampler over the training subset's indices, not range(len(full dataset))",
                        beyond=ev.beyond[:1000], train_size=ev.train_size))
    return out


@dataclass
class LoaderEvidence:
    """What `loader(split)` yielded, matched by exact audio against the split lists."""

    split: str
    examples: int
    only_in: dict[str, list[str]] = field(default_factory=dict)  # split -> refs found only there
    unmatched: int = 0


def judge_loaders(train: str, loaders: Sequence[LoaderEvidence]) -> list[Finding]:
    out: list[Finding] = []
    for ev in loaders:
        foreign = {s: refs for s, refs in ev.only_in.items() if s != ev.split and refs}
        if ev.split == train:
            out += judge_sampler(SamplerEvidence(f"loader({train!r})", ev.examples, foreign))
            continue
        own = len(ev.only_in.get(ev.split, []))
        for split, refs in foreign.items():
            if split != train:
                continue
            out.append(make("split.cache_before_split", "error", STAGE_SPLIT,
                            f"loader({ev.split!r}) serves {len(refs)} {train} examples among {ev.examples} "
                            f"(and {own} of its own), e.g. {', '.join(refs[:3])}, although splits() keeps them "
                            f"apart: it reads features or an index built before the split", CHECK,
                            hint="rebuild the cache after splitting and look examples up by id, not by position",
                            split=ev.split, served_from=train, refs=refs[:1000], own=own, examples=ev.examples))
    return out
