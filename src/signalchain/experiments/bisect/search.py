"""Binary search for the first bad item of an ordered range, with a flake guard and skips.

Shared by `bisect` over commits and over checkpoints. The caller gives the items in order
(oldest first: `items[0]` is the claimed good end, `items[-1]` the claimed bad end) and a
`probe(item) -> Verdict` that runs one golden run and says "good", "bad" or "skip" (the item could
not be run: a commit that does not import, a checkpoint that does not load).

As transformers' `check_bad_commit.py` does, both ends are re-run first: an end whose verdict is
not the one the user claimed is reported as flaky (the failure, or the health, does not reproduce)
and nothing is bisected. A skipped item is replaced by its nearest untried neighbour inside the
open interval, as `git bisect skip` does; when every item between the last good and the first bad
is skipped, the answer is the interval, not one item.

The cost of a clean search over N items is at most ⌈log₂ N⌉ + 2 probes (DESIGN §7); `probe` is
called at most once per item (its results are kept in `SearchResult.verdicts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

__all__ = ["Verdict", "SearchResult", "bisect_range"]

T = TypeVar("T")
Verdict = Literal["good", "bad", "skip"]
Status = Literal["found", "ambiguous", "flaky_good", "flaky_bad", "unrunnable_end"]


@dataclass
class SearchResult(Generic[T]):
    """What the search concluded, and every probe it made (index -> verdict, in probe order)."""

    status: Status
    items: Sequence[T]
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    last_good: int | None = None  # index into items
    first_bad: int | None = None

    @property
    def probes(self) -> int:
        return len(self.verdicts)

    @property
    def skipped(self) -> list[int]:
        return [i for i, v in self.verdicts.items() if v == "skip"]

    @property
    def culprit(self) -> T | None:
        """The first bad item when the search found exactly one."""
        return self.items[self.first_bad] if self.status == "found" and self.first_bad is not None else None

    @property
    def candidates(self) -> list[T]:
        """The items that may hold the change: one when found, the skipped run of them when ambiguous."""
        if self.last_good is None or self.first_bad is None:
            return []
        return list(self.items[self.last_good + 1 : self.first_bad + 1])


def _nearest_untried(lo: int, hi: int, mid: int, verdicts: dict[int, Verdict]) -> int | None:
    """The index in (lo, hi) nearest `mid` not yet probed (left first on a tie)."""
    for d in range(hi - lo):
        for i in (mid - d, mid + d):
            if lo < i < hi and i not in verdicts:
                return i
    return None


def bisect_range(items: Sequence[T], probe: Callable[[T], Verdict]) -> SearchResult[T]:
    """Find the first bad item of `items` (at least two: the good end, then the bad end)."""
    if len(items) < 2:
        raise ValueError(f"bisect needs a good and a bad end: got {len(items)} item(s)")
    res: SearchResult[T] = SearchResult("found", items)

    def ask(i: int) -> Verdict:
        if i not in res.verdicts:
            res.verdicts[i] = probe(items[i])
        return res.verdicts[i]

    lo, hi = 0, len(items) - 1
    good_end, bad_end = ask(lo), ask(hi)
    if "skip" in (good_end, bad_end):
        res.status = "unrunnable_end"
        return res
    if good_end != "good":
        res.status = "flaky_good"
        return res
    if bad_end != "bad":
        res.status = "flaky_bad"
        return res
    while hi - lo > 1:
        i = _nearest_untried(lo, hi, (lo + hi) // 2, res.verdicts)
        if i is None:  # every item strictly between lo and hi was skipped
            break
        verdict = ask(i)
        if verdict == "good":
            lo = i
        elif verdict == "bad":
            hi = i
    res.last_good, res.first_bad = lo, hi
    res.status = "found" if hi - lo == 1 else "ambiguous"
    return res
