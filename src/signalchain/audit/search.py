"""Nearest-neighbour search over window fingerprints with faiss.

Why faiss (not datasketch): the fingerprints are dense unit vectors compared by cosine, which is
faiss's home ground (BLAS inner products, exact or inverted-file indexes, multi-threaded, kept by
Meta); datasketch's MinHash/LSH estimates Jaccard similarity of *sets* and would need the vectors
turned into token sets first, losing the graded similarity the decision needs.

Small collections use an exact flat index. Past `EXACT_LIMIT` vectors an inverted-file index
(IVF: k-means cells, search only the `nprobe` nearest cells) makes the search sub-quadratic:
O(n·√n) with ~√n cells, measured against brute force in benchmarks/bench_audit.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["WindowIndex", "EXACT_LIMIT", "SHARD_VECTORS", "neighbours", "sharded_neighbours", "search_shard",
           "ShardRunner"]

EXACT_LIMIT = 50_000  # vectors: below this a flat (brute-force) index is fast enough and exact
NPROBE = 16
#: Indexed vectors one index holds before the search is sharded: 2^24 vectors of 72 float32 are
#: 4.8 GB of index (IVF adds 8 bytes of id a vector), what one worker of a cluster is expected to hold.
SHARD_VECTORS = 1 << 24

#: Maps `search_shard` over shards: (shards [(vectors, owner)], queries, k) -> each shard's (similarities
#: [Q, k], owners [Q, k]), in the shards' order.
ShardRunner = Callable[[list[tuple[np.ndarray, np.ndarray]], np.ndarray, int], Iterable[tuple[np.ndarray, np.ndarray]]]


@dataclass
class WindowIndex:
    """A faiss index of window vectors and which item each vector belongs to."""

    index: object
    owner: np.ndarray  # [N] int64 item number of each vector
    exact: bool

    @classmethod
    def build(cls, vectors: np.ndarray, owner: np.ndarray, threads: int = 1, exact: bool | None = None,
              seed: int = 0) -> WindowIndex:
        import faiss  # imported here: only audits need it

        faiss.omp_set_num_threads(max(1, threads))
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = x.shape
        exact = n <= EXACT_LIMIT if exact is None else exact
        if exact or n < 4096:
            index = faiss.IndexFlatIP(dim)
            exact = True
        else:
            cells = int(2 ** round(math.log2(max(64.0, 2.0 * math.sqrt(n)))))
            index = faiss.index_factory(dim, f"IVF{cells},Flat", faiss.METRIC_INNER_PRODUCT)
            ivf = faiss.extract_index_ivf(index)
            ivf.cp.niter = 10  # coarse cells need not be optimal, only balanced: 10 k-means rounds
            ivf.cp.min_points_per_centroid = 16  # 32 a cell train them well; faiss warns below 39
            rng = np.random.default_rng(seed)
            index.train(x[rng.choice(n, size=min(n, 32 * cells), replace=False)])
            ivf.nprobe = NPROBE
        index.add(x)
        return cls(index=index, owner=np.asarray(owner, dtype=np.int64), exact=exact)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Similarities `[Q, k]` and owner items `[Q, k]` (-1 where fewer than k exist)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if len(q) == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        sims, ids = self.index.search(q, k)  # type: ignore[attr-defined]
        owners = np.where(ids >= 0, self.owner[np.maximum(ids, 0)], -1)
        return sims, owners


def neighbours(index: WindowIndex, queries: np.ndarray, query_owner: np.ndarray, k: int,
               min_similarity: float) -> dict[tuple[int, int], float]:
    """(query item, indexed item) → best window similarity, for every pair above `min_similarity`."""
    sims, owners = index.search(queries, k)
    return _pairs(sims, owners, query_owner, k, min_similarity)


def search_shard(vectors: np.ndarray, owner: np.ndarray, queries: np.ndarray, k: int,
                 threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of `queries` in an index of one shard's vectors (run where the shard is: here, or a Ray task)."""
    return WindowIndex.build(vectors, owner, threads).search(queries, k)


def merge_topk(best: tuple[np.ndarray, np.ndarray], more: tuple[np.ndarray, np.ndarray],
               k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most similar of two [Q, k] results per query (what one index of both shards would return)."""
    sims = np.concatenate([best[0], more[0]], axis=1)
    owners = np.concatenate([best[1], more[1]], axis=1)
    sims = np.where(owners >= 0, sims, -np.inf)
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, top, axis=1), np.take_along_axis(owners, top, axis=1)


def sharded_neighbours(vectors: np.ndarray, owner: np.ndarray, queries: np.ndarray, query_owner: np.ndarray,
                       k: int, min_similarity: float, *, shard_vectors: int = SHARD_VECTORS, threads: int = 1,
                       run: ShardRunner | None = None,
                       ) -> dict[tuple[int, int], float]:
    """`neighbours` over an index too large for one machine: the indexed vectors are cut into shards of
    at most `shard_vectors`, every query searches each shard (`run` maps `search_shard` over them: in
    turn here, or as parallel tasks on a cluster), and the per-shard top-k are merged into the top-k
    one index would give. One shard is exactly `neighbours` on one index."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n = len(vectors)
    step = max(1, shard_vectors)
    shards = [(vectors[a : a + step], owner[a : a + step]) for a in range(0, n, step)]
    if run is None:
        results: Iterable[tuple[np.ndarray, np.ndarray]] = (search_shard(v, o, q, k, threads) for v, o in shards)
    else:
        results = run(shards, q, k)
    best = (np.full((len(q), k), -np.inf, np.float32), np.full((len(q), k), -1, np.int64))
    for got in results:
        best = merge_topk(best, got, k) if len(shards) > 1 else got
    return _pairs(best[0], best[1], query_owner, k, min_similarity)


def _pairs(sims: np.ndarray, owners: np.ndarray, query_owner: np.ndarray, k: int,
           min_similarity: float) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    qo = np.repeat(np.asarray(query_owner, dtype=np.int64)[:, None], k, axis=1)
    keep = (sims >= min_similarity) & (owners >= 0) & (owners != qo)
    for a, b, s in zip(qo[keep].tolist(), owners[keep].tolist(), sims[keep].tolist()):
        if out.get((a, b), -1.0) < s:
            out[(a, b)] = s
    return out
