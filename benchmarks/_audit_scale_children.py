"""The measurements of `bench_audit_scale.py`, each run in a child process of its own (so that its
peak RSS is its own): the synthetic fingerprints, the gathered and sharded searches, one real shard,
and the fingerprint cache. See bench_audit_scale.py for what is measured and how."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from signalchain.audio import fingerprint as fpmod

SR = 32000
CLIP_SECONDS = 30.0
CLIP_COS = 0.85  # a synthetic clip's window vs its pool window
PLANT_COS = 0.97  # a planted copy's window vs its training clip's window
EVAL_SHARE = 0.05
PLANT_SHARE = 0.01
POOL_CLIPS = 160
CLUSTER_CORES = 64


def windows_per_clip(seconds: float = CLIP_SECONDS) -> int:
    """Window vectors of a clip of `seconds`, from the fingerprint's constants."""
    frames = 1 + (int(round(seconds * fpmod.RATE)) - fpmod.N_FFT) // fpmod.HOP
    return 1 + (frames - fpmod.WINDOW) // fpmod.WINDOW_HOP


def frames_per_clip(seconds: float = CLIP_SECONDS) -> int:
    return 1 + (int(round(seconds * fpmod.RATE)) - fpmod.N_FFT) // fpmod.HOP


W = windows_per_clip()
DIM = fpmod.DIM


def _sigma(cos: float) -> float:
    """Per-component noise that moves a unit vector to cosine `cos` with itself (in expectation)."""
    return math.sqrt(1.0 / cos**2 - 1.0) / math.sqrt(DIM)


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> dict[str, float]:
    return {"wall_s": time.perf_counter() - t[0], "cpu_s": time.process_time() - t[1]}


# ---- synthesis ---------------------------------------------------------------------------------

def synth(pool: np.ndarray, clips: int, rng: np.random.Generator, out: np.ndarray | None = None,
          chunk: int = 20_000) -> np.ndarray:
    """[clips * W, DIM] float32: each clip a pool clip's W windows moved to cosine CLIP_COS, renormalised."""
    out = np.empty((clips * W, DIM), np.float32) if out is None else out
    sigma = np.float32(_sigma(CLIP_COS))
    for a in range(0, clips, chunk):
        b = min(clips, a + chunk)
        x = pool[rng.integers(0, len(pool), size=b - a)].reshape(-1, DIM)
        x = x + sigma * rng.standard_normal(x.shape, dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[a * W : b * W] = x
    return out


def plant(train: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A near-copy [W, DIM] of one training clip's windows [W, DIM]."""
    x = train + np.float32(_sigma(PLANT_COS)) * rng.standard_normal(train.shape, dtype=np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# ---- children ------------------------------------------------------------------------------------

def child_pool(work: Path, quick: bool) -> dict[str, Any]:
    """Real fingerprints of POOL_CLIPS 30 s clips (saved for the other children), the per-core measuring
    rate on 30 s WAV files, and the time of one alignment of two 30 s envelopes."""
    import soundfile as sf

    from signalchain.audit.measure import measure_batch
    from signalchain.records.audit import Item
    from signalchain.reference.data import generate_clip

    n_pool = 40 if quick else POOL_CLIPS
    clips = [generate_clip(i, 31, SR, seconds=CLIP_SECONDS) for i in range(n_pool)]
    fps = [fpmod.fingerprint(c.audio, SR) for c in clips]
    assert all(f.windows.shape == (W, DIM) for f in fps), (fps[0].windows.shape, W)
    pool = np.stack([f.windows for f in fps]).astype(np.float32)
    np.save(work / "pool.npy", pool)
    np.save(work / "frames.npy", fps[0].frames)
    # the per-core measuring rate: decode + measure of 30 s stereo 32 kHz PCM_16 WAV files, one process
    wavs = []
    for i, c in enumerate(clips[: 8 if quick else 40]):
        p = work / f"rate-{i}.wav"
        sf.write(p, c.audio.T, SR, subtype="PCM_16")
        wavs.append(str(p))
    tasks = [(i, Item(split="train", ref=p, path=p), True) for i, p in enumerate(wavs)]
    measure_batch(tasks[:1])  # warm
    t = _clock()
    got = measure_batch(tasks)
    rate = _since(t)
    assert all(m is not None and not m.problem for _, _, m in got)
    for p in wavs:
        os.remove(p)
    audio = len(wavs) * CLIP_SECONDS
    a, b = fps[0].frames, fps[1].frames
    fpmod.align(a, b)
    t = _clock()
    reps = 10 if quick else 40
    for _ in range(reps):
        fpmod.align(a, b)
    al = _since(t)
    return {"pool_clips": n_pool, "windows_per_clip": W, "frames_per_clip": int(fps[0].frames.shape[1]),
            "rate_files": len(wavs), "rate_audio_s": audio, "rate_wall_s": rate["wall_s"], "rate_cpu_s": rate["cpu_s"],
            "x_real_time_per_core": audio / rate["wall_s"], "x_real_time_per_core_cpu": audio / rate["cpu_s"],
            "align_s_per_pair": al["wall_s"] / reps, "align_cpu_s_per_pair": al["cpu_s"] / reps}


def _dataset(pool: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[int, int], int]:
    """All n clips' windows [n*W, DIM] float16, the planted {eval clip: training clip}, and n_eval."""
    n_eval = max(1, int(round(EVAL_SHARE * n)))
    n_train = n - n_eval
    x = np.empty((n * W, DIM), np.float16)
    step = 2_000  # small chunks: the synthesis' temporaries stay far below the search's peak
    for a in range(0, n, step):
        b = min(n, a + step)
        x[a * W : b * W] = synth(pool, b - a, rng)
    planted = rng.choice(np.arange(n_train, n), size=max(1, int(round(PLANT_SHARE * n_eval))), replace=False)
    partner = {int(v): int(rng.integers(0, n_train)) for v in planted}
    for v, t in partner.items():
        x[v * W : (v + 1) * W] = plant(x[t * W : (t + 1) * W].astype(np.float32), rng)
    return x, partner, n_eval


def _no_neighbours(shards: list, queries: np.ndarray, k: int):  # noqa: ANN001, ANN202
    """A shard runner whose shards run elsewhere: the driver's own memory in the sharded path."""
    for _ in shards:
        yield np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)


def child_search(work: Path, n: int, shard_vectors: int | None, threads: int, stub: bool = False) -> dict[str, Any]:
    """The real `find_matches` on n synthetic clips (gathered, or sharded at `shard_vectors`; with `stub`,
    the shards return nothing, as if they ran on other machines: the driver's side alone)."""
    from signalchain.audit import leakage
    from signalchain.audit.leakage import Entry, find_matches
    from signalchain.audit.search import SHARD_VECTORS

    pool = np.load(work / "pool.npy")
    rng = np.random.default_rng(n)
    rss0 = _rss()
    t = _clock()
    x, partner, n_eval = _dataset(pool, n, rng)
    made = _since(t)
    n_train = n - n_eval
    windows = [x[i * W : (i + 1) * W] for i in range(n)]  # what the driver keeps: each clip's float16 windows
    entries = [Entry("train" if i < n_train else "valid", f"c{i}", f"c{i}") for i in range(n)]
    rss_kept = _rss()
    pairs: set[tuple[int, int]] = set()
    current = [-1]

    def frames_of(i: int) -> None:  # records the candidate pairs find_matches would align (a first, then b)
        if i >= n_train:
            current[0] = i
        else:
            pairs.add((current[0], i))
        return None

    t = _clock()
    _, stats = find_matches(entries, windows, frames_of, threads=threads,
                            shard_vectors=shard_vectors or SHARD_VECTORS, run_shards=_no_neighbours if stub else None)
    took = _since(t)
    found = sum((v, p) in pairs for v, p in partner.items())
    indexed = n_train * W
    sv = shard_vectors or SHARD_VECTORS
    return {"clips": n, "eval_clips": n_eval, "vectors": n * W, "indexed_vectors": indexed, "query_vectors": n_eval * W,
            "shard_vectors": sv, "shards": math.ceil(indexed / sv), "synth_s": made["wall_s"],
            "search_wall_s": took["wall_s"], "search_cpu_s": took["cpu_s"], "candidates": stats["candidates"],
            "planted": len(partner), "found": found, "recall": found / len(partner),
            "driver_windows_bytes": int(x.nbytes), "rss_before": rss0, "rss_with_windows": rss_kept,
            "neighbours": leakage.NEIGHBOURS}


def child_shard(work: Path, shard_vectors: int, query_clips: int, threads: int) -> dict[str, Any]:
    """One real shard: `WindowIndex.build` on `shard_vectors` vectors, then a search of `query_clips`
    evaluation clips' windows (1 % planted copies of clips in the shard); the driver's merge per query."""
    from signalchain.audit import leakage
    from signalchain.audit.search import WindowIndex, _pairs, merge_topk

    pool = np.load(work / "pool.npy")
    rng = np.random.default_rng(7)
    clips = shard_vectors // W
    rss0 = _rss()
    t = _clock()
    vecs = synth(pool, clips, rng)
    owner = np.repeat(np.arange(clips, dtype=np.int64), W)
    q = synth(pool, query_clips, rng)
    q_owner = np.repeat(np.arange(clips, clips + query_clips, dtype=np.int64), W)
    planted = rng.choice(query_clips, size=max(1, int(round(PLANT_SHARE * query_clips))), replace=False)
    partner = {}
    for j in planted:
        tr = int(rng.integers(0, clips))
        q[j * W : (j + 1) * W] = plant(vecs[tr * W : (tr + 1) * W], rng)
        partner[clips + int(j)] = tr
    made = _since(t)
    rss_data = _rss()
    t = _clock()
    index = WindowIndex.build(vecs, owner, threads)
    build = _since(t)
    rss_index = _rss()
    t = _clock()
    sims, owners = index.search(q, leakage.NEIGHBOURS)
    search = _since(t)
    t = _clock()
    found_pairs = _pairs(sims, owners, q_owner, leakage.NEIGHBOURS, leakage.CANDIDATE_SIMILARITY)
    pairs_t = _since(t)
    t = _clock()
    merge_topk((sims, owners), (sims, owners), leakage.NEIGHBOURS)
    merge = _since(t)
    found = sum((v, p) in found_pairs for v, p in partner.items())
    nq = len(q)
    ivf_bytes = int(index.index.ntotal) * (DIM * 4 + 8)  # type: ignore[attr-defined]
    return {"shard_vectors": shard_vectors, "shard_clips": clips, "vectors": clips * W, "exact": index.exact,
            "cells": int(getattr(index.index, "nlist", 0)), "query_clips": query_clips, "query_vectors": nq,
            "synth_s": made["wall_s"], "build_wall_s": build["wall_s"], "build_cpu_s": build["cpu_s"],
            "search_wall_s": search["wall_s"], "search_cpu_s": search["cpu_s"],
            "search_wall_s_per_query": search["wall_s"] / nq, "search_cpu_s_per_query": search["cpu_s"] / nq,
            "pairs_s_per_query": pairs_t["wall_s"] / nq, "merge_s_per_query": merge["wall_s"] / nq,
            "planted": len(partner), "found": found, "recall": found / len(partner),
            "rss_before": rss0, "rss_data": rss_data, "rss_index": rss_index, "index_rss_growth": rss_index - rss_data,
            "index_bytes": ivf_bytes, "vectors_bytes": int(vecs.nbytes), "owner_bytes": int(owner.nbytes),
            "threads": threads}


def child_cache(work: Path, sizes: list[int], lookups: int) -> dict[str, Any]:
    """put_many / get / frames of a FingerprintCache as it grows to each of `sizes` rows."""
    import hashlib

    from signalchain.audio.fingerprint import Fingerprint
    from signalchain.audit.cache import FingerprintCache
    from signalchain.records.audit import Measure

    pool = np.load(work / "pool.npy")
    frames = np.load(work / "frames.npy")
    assert frames.shape == (fpmod.BANDS, frames_per_clip())
    summary = {"rms_dbfs": -18.2, "peak": 0.71, "dc": 0.0001, "silence_fraction": 0.0, "clipping_fraction": 0.0,
               "nonfinite_fraction": 0.0, "mono_energy_db": -0.4}
    db_path = work / "cache.sqlite"
    cache = FingerprintCache(db_path)
    rng = np.random.default_rng(3)
    rows: list[dict[str, Any]] = []
    have = 0
    key = (7_680_044, 1_700_000_000_000_000_000)

    def measure(i: int) -> Measure:
        fp = Fingerprint(frames=frames, windows=pool[i % len(pool)], seconds=CLIP_SECONDS)
        return Measure(sample_rate=SR, channels=2, samples=int(CLIP_SECONDS * SR), summary=summary, total=0.25 * i,
                       total_sq=1234.5 + i, audio_hash=hashlib.sha1(str(i).encode()).hexdigest(), fp=fp)

    for size in sizes:
        t = _clock()
        for a in range(have, size, 256):
            cache.put_many((f"/data/music/train/audio/clip-{i:08d}.wav", key, measure(i))
                           for i in range(a, min(size, a + 256)))
        put = _since(t)
        added = size - have
        have = size
        picks = rng.integers(0, size, size=lookups)
        t = _clock()
        for i in picks:
            m = cache.get(f"/data/music/train/audio/clip-{int(i):08d}.wav", key)
            assert m is not None and m.fp is not None and m.fp.windows.shape == (W, DIM)
        get = _since(t)
        t = _clock()
        for i in picks:
            f = cache.frames(f"/data/music/train/audio/clip-{int(i):08d}.wav")
            assert f is not None and f.shape == frames.shape
        fr = _since(t)
        wal = sum(p.stat().st_size for p in work.glob("cache.sqlite-wal"))
        cache._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # untimed: the database file then holds every row
        db = db_path.stat().st_size
        disk = db + wal
        rows.append({"rows": size, "added": added, "put_s_per_row": put["wall_s"] / added,
                     "put_cpu_s_per_row": put["cpu_s"] / added, "get_s": get["wall_s"] / lookups,
                     "frames_s": fr["wall_s"] / lookups, "disk_bytes": disk, "db_bytes": db,
                     "wal_bytes": disk - db, "bytes_per_row": db / size, "lookups": lookups})
    cache.close()
    return {"rows": rows, "frames_shape": list(frames.shape), "windows_shape": [W, DIM],
            "payload_bytes_per_row": int(frames.nbytes + W * DIM * 2)}
