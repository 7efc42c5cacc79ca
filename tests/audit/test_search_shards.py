"""The sharded search finds what one index finds: per-shard top-k merged are one index's top-k.

With flat (exact) shards the candidate pairs and their similarities are equal for any shard size,
including shards that cut one clip's windows in two, a last shard of one vector, and owners that
repeat across shards. IVF shards are approximate, as one IVF index is; that regime is measured in
benchmarks/bench_audit_scale.py, not asserted here.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from signalchain.audio.fingerprint import DIM
from signalchain.audit.search import WindowIndex, merge_topk, neighbours, sharded_neighbours


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _data(seed: int, n: int, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.normal(size=(n, DIM)))
    owner = np.sort(rng.integers(0, max(1, n // 4), size=n))  # clips of about 4 windows, some cut by shards
    picks = rng.integers(0, n, size=q)
    queries = _unit(vectors[picks] + rng.uniform(0.01, 0.4) * rng.normal(size=(q, DIM)))
    return vectors, owner, queries, np.arange(10_000, 10_000 + q)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 600), q=st.integers(1, 60), shard=st.integers(1, 700),
       k=st.integers(1, 12))
def test_flat_shards_merged_equal_one_flat_index(seed: int, n: int, q: int, shard: int, k: int) -> None:
    vectors, owner, queries, query_owner = _data(seed, n, q)
    one = neighbours(WindowIndex.build(vectors, owner, exact=True), queries, query_owner, k, 0.3)
    sharded = sharded_neighbours(vectors, owner, queries, query_owner, k, 0.3, shard_vectors=shard)
    assert sharded.keys() == one.keys()
    assert all(abs(sharded[p] - one[p]) < 1e-5 for p in one)


def test_a_runner_gets_every_shard_once_in_order() -> None:
    vectors, owner, queries, query_owner = _data(3, 250, 20)
    seen: list[int] = []

    def run(shards, q, k):  # noqa: ANN001, ANN202 - the ShardRunner protocol, as the Ray engine implements it
        from signalchain.audit.search import search_shard

        for v, o in shards:
            seen.append(len(v))
            yield search_shard(v, o, q, k)

    one = neighbours(WindowIndex.build(vectors, owner, exact=True), queries, query_owner, 10, 0.3)
    assert sharded_neighbours(vectors, owner, queries, query_owner, 10, 0.3, shard_vectors=100, run=run) == one
    assert seen == [100, 100, 50]


def test_merge_keeps_the_best_k_and_never_a_missing_slot() -> None:
    a = (np.array([[0.9, 0.5, -1.0]], np.float32), np.array([[1, 2, -1]]))  # one slot empty (owner -1)
    b = (np.array([[0.7, 0.6, 0.1]], np.float32), np.array([[3, 4, 5]]))
    sims, owners = merge_topk(a, b, 3)
    assert owners.tolist() == [[1, 3, 4]] and np.allclose(sims, [[0.9, 0.7, 0.6]])
