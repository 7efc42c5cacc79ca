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
from dataclasses import dataclass

import numpy as np

__all__ = ["WindowIndex", "EXACT_LIMIT", "neighbours"]

EXACT_LIMIT = 50_000  # vectors: below this a flat (brute-force) index is fast enough and exact
NPROBE = 16


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
    out: dict[tuple[int, int], float] = {}
    qo = np.repeat(np.asarray(query_owner, dtype=np.int64)[:, None], k, axis=1)
    keep = (sims >= min_similarity) & (owners >= 0) & (owners != qo)
    for a, b, s in zip(qo[keep].tolist(), owners[keep].tolist(), sims[keep].tolist()):
        if out.get((a, b), -1.0) < s:
            out[(a, b)] = s
    return out
