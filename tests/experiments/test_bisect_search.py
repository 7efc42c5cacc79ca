"""The shared binary search: first bad item, probe budget, skips and flaky ends."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from signalchain.experiments.bisect import bisect_range


def _probe(first_bad: int, skip: frozenset[int] = frozenset(), calls: list[int] | None = None):
    def probe(i: int):
        if calls is not None:
            calls.append(i)
        if i in skip:
            return "skip"
        return "bad" if i >= first_bad else "good"

    return probe


@given(n=st.integers(2, 200), data=st.data())
def test_finds_the_first_bad_item_within_the_budget(n, data):
    first_bad = data.draw(st.integers(1, n - 1))
    calls: list[int] = []
    res = bisect_range(list(range(n)), _probe(first_bad, calls=calls))
    assert res.status == "found" and res.culprit == first_bad and res.last_good == first_bad - 1
    assert res.probes == len(calls) == len(set(calls))  # each item probed at most once
    assert res.probes <= math.ceil(math.log2(n)) + 2
    assert calls[:2] == [0, n - 1]  # both ends are re-run first


def test_a_skipped_item_is_replaced_by_a_neighbour():
    res = bisect_range(list(range(16)), _probe(11, skip=frozenset({7, 8})))
    assert res.status == "found" and res.culprit == 11
    assert set(res.skipped) <= {7, 8}


def test_every_item_between_skipped_gives_the_interval():
    res = bisect_range(list(range(8)), _probe(4, skip=frozenset({3, 4})))
    assert res.status == "ambiguous"
    assert res.culprit is None and res.candidates == [3, 4, 5]  # 5 is bad, 3 and 4 unknown


@pytest.mark.parametrize(("first_bad", "status"), [(0, "flaky_good"), (99, "flaky_bad")])
def test_an_end_that_does_not_reproduce_is_flaky_and_not_bisected(first_bad, status):
    calls: list[int] = []
    res = bisect_range(list(range(10)), _probe(first_bad, calls=calls))
    assert res.status == status and calls == [0, 9] and res.culprit is None


def test_an_end_that_cannot_run():
    res = bisect_range(list(range(5)), _probe(2, skip=frozenset({4})))
    assert res.status == "unrunnable_end"


def test_fewer_than_two_items_is_refused():
    with pytest.raises(ValueError, match="good and a bad end"):
        bisect_range([1], _probe(0))
