"""The audit at 10^6 and 10^7 clips, simulated: the window search, the driver's memory, the fingerprint cache.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_audit_scale.py [--quick] [--json out.json]

Nothing here decodes 10^6 files: the window vectors are synthesised with the real fingerprint's
dimensions and distribution. A pool of real clips (the reference data generator, 30 s each) is
fingerprinted; a 30 s clip has W window vectors of DIM floats (W computed from the fingerprint's
constants: RATE, N_FFT, HOP, WINDOW, WINDOW_HOP). Each synthetic clip takes the W windows of a random
pool clip, each moved by Gaussian noise to a cosine of about 0.85 with its origin and renormalised
(two clips made from one pool clip then sit near 0.72, below the audit's 0.85 candidate threshold).
5 % of the clips form an evaluation split; 1 % of those are planted near-copies of random training
clips (cosine about 0.97, what real copies score); recall = planted pairs the search returns as
candidates. Every size runs in a fresh subprocess so its peak RSS (`os.wait4`'s ru_maxrss) is its own.

Measured:

- search, gathered (the audit's default path below `search.SHARD_VECTORS` indexed vectors): the
  real `leakage.find_matches` on the clips' float16 windows (one IVF index of the training windows,
  the evaluation windows as queries; alignment is skipped: no frames), at 10^4, 3·10^4 and 10^5
  clips: wall and CPU seconds, peak RSS, recall, candidate pairs; time ∝ n^a fitted on these sizes;
- search, sharded, at 10^4 clips with small shards (the same `find_matches`, `shard_vectors` cut so
  that it shards, shards searched in turn in this process) next to the sum computed from one of its
  shards measured alone: a check of the per-shard model used below;
- one real shard of `SHARD_VECTORS` vectors (what every shard of a 10^6 or 10^7 audit is): build
  (`WindowIndex.build`, k-means + adding) and search of a subsample of the evaluation queries
  (`--shard-queries` clips), one thread, as `ray_engine.shard_runner` runs it; its index memory
  (RSS growth over the build, and the index's own bytes: float32 + 8-byte ids); the driver's merge of
  one shard's top-k (`merge_topk`) per query;
- the fingerprint cache (`cache.FingerprintCache`, SQLite): `put_many` in batches of 256 (as the audit
  flushes), `get` and `frames` on random rows, at 10^3 and 10^4 rows of 30 s clips (frames
  [BANDS, frames of 30 s] float16 and W windows, scalars of a real clip), bytes per row on disk;
- the per-core measuring rate (decode + summary + fingerprint, `measure.measure_batch` on 30 s
  stereo 32 kHz WAV files, one process) and the alignment of one candidate pair (`align` of two
  30 s envelopes).

Computed (and labelled so): at 10^6 and 10^7 clips the full query set against every shard cannot
run here; total search = shards × (one shard's build + queries × the measured per-query search cost;
a search's cost is linear in its queries), every shard counted as a full one; the driver's float16
windows = clips × W × DIM × 2 bytes, its search copies from `find_matches`' peak bytes per window
measured at the gathered sizes; the cache's size and time linear in rows from bytes and seconds per row;
a 64-core cluster's hours from these per-core costs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from signalchain.audio import fingerprint as fpmod
from signalchain.audit.leakage import MAX_CANDIDATES

sys.path.insert(0, str(Path(__file__).parent))  # the children's module beside this file

from _audit_scale_children import (  # noqa: E402
    CLIP_SECONDS,
    CLUSTER_CORES,
    DIM,
    EVAL_SHARE,
    W,
    child_cache,
    child_pool,
    child_search,
    child_shard,
    frames_per_clip,
)

# ---- parent --------------------------------------------------------------------------------------

def run_child(args: list[str]) -> dict[str, Any]:
    """Run this file as a child with `args`; its JSON result plus its own peak RSS (os.wait4)."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed with {proc.returncode}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["peak_rss"] = usage.ru_maxrss * 1024  # Linux: KiB
    res["child_wall_s"] = time.perf_counter() - t0
    return res


def fit_exponent(ns: list[float], ts: list[float]) -> float:
    """a of t ∝ n^a, least squares on the logs."""
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def gb(x: float) -> str:
    return f"{x / 1e9:,.2f}"


def hours(s: float) -> str:
    return f"{s / 3600:,.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--shard-vectors", type=int, default=None, help="the real shard's vectors (default "
                    "search.SHARD_VECTORS)")
    ap.add_argument("--shard-queries", type=int, default=2000, help="evaluation clips searched in the real shard")
    ap.add_argument("--workdir", help="where the children keep their files (default: a temporary folder)")
    ap.add_argument("--report", metavar="JSON", help="print the tables again from a JSON this benchmark wrote")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--sv", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        work = Path(args.workdir)
        if args.child == "pool":
            res = child_pool(work, args.quick)
        elif args.child == "search":
            res = child_search(work, args.n, args.sv or None, 1)
        elif args.child == "driver":
            res = child_search(work, args.n, args.sv, 1, stub=True)
        elif args.child == "shard":
            res = child_shard(work, args.sv, args.n, 1)
        else:
            res = child_cache(work, [int(s) for s in args.sizes.split(",")], args.n)
        print(json.dumps(res))
        return

    from signalchain.audit import leakage
    from signalchain.audit.search import SHARD_VECTORS

    if args.report:
        saved = json.loads(Path(args.report).read_text())
        p = saved.get("params", {"shard_vectors": SHARD_VECTORS, "check_n": 10_000, "check_sv": 1 << 17})
        report(saved, [10**6, 10**7], p["shard_vectors"], p["check_n"], p["check_sv"], leakage.NEIGHBOURS)
        return
    quick = args.quick
    shard_vectors = args.shard_vectors or (1 << 18 if quick else SHARD_VECTORS)
    shard_queries = 100 if quick else args.shard_queries
    gathered = [2_000, 5_000] if quick else [10_000, 30_000, 100_000]
    check_n, check_sv = (5_000, 1 << 16) if quick else (10_000, 1 << 17)
    cache_sizes = [200, 1_000] if quick else [1_000, 10_000, 30_000]
    driver_n, driver_sv = (5_000, 1 << 16) if quick else (100_000, 1 << 20)
    targets = [10**6, 10**7]
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-audit-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    common = ["--workdir", str(work)] + (["--quick"] if quick else [])
    out: dict[str, Any] = {"windows_per_clip": W, "dim": DIM, "clip_seconds": CLIP_SECONDS, "cores": os.cpu_count(),
                           "load_average_start": os.getloadavg(), "threads": 1,
                           "params": {"shard_vectors": shard_vectors, "check_n": check_n, "check_sv": check_sv}}
    try:
        print(f"30 s clips: {W} window vectors of {DIM} floats each (from the fingerprint's constants); "
              f"{frames_per_clip()} envelope frames of {fpmod.BANDS} bands", flush=True)
        pool = run_child(["--child", "pool", *common])
        out["pool"] = pool
        print(f"pool: {pool['pool_clips']} real 30 s clips fingerprinted; measuring rate "
              f"{pool['x_real_time_per_core']:.0f}× real time per core (wall), alignment "
              f"{pool['align_s_per_pair'] * 1e3:.1f} ms a pair", flush=True)
        searches = []
        for n in gathered:
            r = run_child(["--child", "search", "--n", str(n), *common])
            searches.append(r)
            print(f"gathered search, {n:,} clips: {r['search_wall_s']:.1f} s, peak RSS {gb(r['peak_rss'])} GB, "
                  f"recall {r['found']}/{r['planted']}", flush=True)
        out["gathered"] = searches
        sharded = run_child(["--child", "search", "--n", str(check_n), "--sv", str(check_sv), *common])
        one = run_child(["--child", "shard", "--n", str(max(1, int(round(EVAL_SHARE * check_n)))),
                         "--sv", str(check_sv), *common])
        out["sharded_check"] = {"sharded": sharded, "one_shard": one}
        driver = run_child(["--child", "driver", "--n", str(driver_n), "--sv", str(driver_sv), *common])
        out["driver"] = driver
        print(f"driver alone in the sharded path, {driver_n:,} clips: peak RSS {gb(driver['peak_rss'])} GB", flush=True)
        print(f"sharded search, {check_n:,} clips in shards of {check_sv:,}: {sharded['search_wall_s']:.1f} s",
              flush=True)
        shard = run_child(["--child", "shard", "--n", str(shard_queries), "--sv", str(shard_vectors), *common])
        out["shard"] = shard
        print(f"one real shard of {shard_vectors:,} vectors: build {shard['build_wall_s']:.1f} s, search of "
              f"{shard['query_vectors']:,} queries {shard['search_wall_s']:.1f} s, peak RSS {gb(shard['peak_rss'])} GB",
              flush=True)
        cache = run_child(["--child", "cache", "--sizes", ",".join(map(str, cache_sizes)),
                           "--n", "200" if quick else "1000", *common])
        out["cache"] = cache
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    out["load_average_end"] = os.getloadavg()
    report(out, targets, shard_vectors, check_n, check_sv, leakage.NEIGHBOURS)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


def report(out: dict[str, Any], targets: list[int], shard_vectors: int, check_n: int, check_sv: int,
           k: int) -> None:
    pool, searches, shard, cache = out["pool"], out["gathered"], out["shard"], out["cache"]
    chk = out["sharded_check"]
    print(f"\nmachine: {out['cores']} cores; load average at start {out['load_average_start'][0]:.2f}, at end "
          f"{out['load_average_end'][0]:.2f}; every search one thread\n")

    # ---- search, measured ----
    print("Search, measured (the real `find_matches`, one IVF index of the training windows, evaluation windows "
          "as queries; a fresh process each):\n")
    print("| clips | indexed vectors | query vectors | search wall s | search CPU s | peak RSS GB "
          "| driver float16 windows GB | recall (planted found) | candidate pairs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in searches:
        print(f"| {r['clips']:,} | {r['indexed_vectors']:,} | {r['query_vectors']:,} | {r['search_wall_s']:.1f} "
              f"| {r['search_cpu_s']:.1f} | {gb(r['peak_rss'])} | {gb(r['driver_windows_bytes'])} "
              f"| {r['recall']:.2f} ({r['found']}/{r['planted']}) | {r['candidates']:.0f} |")
    ns = [r["clips"] for r in searches]
    a_t = fit_exponent(ns, [r["search_wall_s"] for r in searches])
    a_m = fit_exponent(ns, [r["peak_rss"] for r in searches])
    per_window = [(r["peak_rss"] - r["rss_before"]) / r["vectors"] for r in searches]
    out["growth"] = {"search_time_exponent": a_t, "peak_rss_exponent": a_m, "peak_bytes_per_window": per_window}
    print(f"\ngrowth fitted on the measured sizes: search time ∝ n^{a_t:.2f}, peak RSS ∝ n^{a_m:.2f}; "
          f"peak RSS above the empty process per window vector: "
          + ", ".join(f"{b:,.0f} B" for b in per_window))

    # ---- the per-shard model, checked ----
    s, o = chk["sharded"], chk["one_shard"]
    model = s["shards"] * (o["build_wall_s"] + o["search_wall_s_per_query"] * s["query_vectors"])
    out["sharded_check"]["model_s"] = model
    print(f"\nPer-shard model checked at {check_n:,} clips, shards of {check_sv:,} vectors ({s['shards']} shards): "
          f"`find_matches` sharded, measured {s['search_wall_s']:.1f} s (recall {s['found']}/{s['planted']}); "
          f"shards × (one shard's measured build {o['build_wall_s']:.2f} s + {s['query_vectors']:,} queries × "
          f"{o['search_wall_s_per_query'] * 1e6:.1f} µs) = {model:.1f} s computed")

    # ---- one shard ----
    print(f"\nOne real shard of {shard['vectors']:,} vectors (`SHARD_VECTORS` = {shard_vectors:,}: {shard['cells']} "
          f"IVF cells, one thread), measured:\n")
    print("| what | wall s | CPU s | per query |")
    print("|---|---:|---:|---:|")
    print(f"| synthesise the shard's vectors | {shard['synth_s']:.1f} | | |")
    print(f"| build (k-means + add) | {shard['build_wall_s']:.1f} | {shard['build_cpu_s']:.1f} | |")
    print(f"| search {shard['query_vectors']:,} query windows ({shard['query_clips']:,} evaluation clips) "
          f"| {shard['search_wall_s']:.1f} | {shard['search_cpu_s']:.1f} | "
          f"{shard['search_wall_s_per_query'] * 1e6:.0f} µs |")
    print(f"| driver: merge this shard's top-{k} into the best so far | | | "
          f"{shard['merge_s_per_query'] * 1e6:.2f} µs |")
    print(f"\nrecall in the shard: {shard['found']}/{shard['planted']} planted copies; index bytes (float32 + 8-byte "
          f"ids) {gb(shard['index_bytes'])} GB, RSS growth over the build {gb(shard['index_rss_growth'])} GB, "
          f"the shard's float32 vectors {gb(shard['vectors_bytes'])} GB, the task's peak RSS "
          f"{gb(shard['peak_rss'])} GB")

    # ---- the driver alone, sharded path ----
    d = out["driver"]
    bpw = (d["peak_rss"] - d["rss_before"]) / d["vectors"]
    out["growth"]["driver_sharded_bytes_per_window"] = bpw
    print(f"\nThe driver alone in the sharded path, MEASURED at {d['clips']:,} clips ({d['shards']} shards of "
          f"{d['shard_vectors']:,} vectors whose searches return nothing, as if they ran elsewhere): peak RSS "
          f"{gb(d['peak_rss'])} GB, {bpw:,.0f} B a window vector above the empty process (the float16 windows it "
          f"keeps are {DIM * 2} B)")
    # what one shard task holds besides its index: its copy of every query (float32) and the [Q, k] results
    # (faiss' float32 similarities and int64 ids, then WindowIndex.search's int64 temporaries and owners)
    per_query = DIM * 4 + k * (4 + 8 + 8 + 8 + 1 + 8)

    # ---- at scale, computed ----
    rows = []
    for n in targets:
        n_eval = round(EVAL_SHARE * n)
        q = n_eval * W
        indexed = (n - n_eval) * W
        shards = math.ceil(indexed / shard_vectors)
        per_shard = shard["build_wall_s"] + q * shard["search_wall_s_per_query"]
        per_shard_cpu = shard["build_cpu_s"] + q * shard["search_cpu_s_per_query"]
        merge = q * shard["merge_s_per_query"] * max(0, shards - 1)
        rows.append({"clips": n, "indexed_vectors": indexed, "query_vectors": q, "shards": shards,
                     "per_shard_s": per_shard, "shards_total_s": shards * per_shard,
                     "shards_total_cpu_s": shards * per_shard_cpu, "driver_merge_s": merge,
                     "driver_windows_bytes": n * W * DIM * 2, "driver_search_peak_bytes": n * W * bpw,
                     "shard_task_bytes": shard["peak_rss"] + (q - shard["query_vectors"]) * per_query,
                     })
    out["at_scale"] = rows
    print(f"\nSearch at scale in shards of {shard_vectors:,} vectors, COMPUTED: shards × (the shard's measured build "
          "+ queries × its measured per-query search), every shard counted full (an over-estimate by at most one "
          "shard); memory from the measured bytes per window / per query:\n")
    print("| clips | indexed vectors | query vectors | shards | one shard s | all shards, one core, h "
          "| driver merge h | driver float16 windows GB | driver peak in search GB | one shard task's memory GB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['clips']:,} | {r['indexed_vectors']:,} | {r['query_vectors']:,} | {r['shards']} "
              f"| {r['per_shard_s']:,.0f} | {hours(r['shards_total_s'])} | {hours(r['driver_merge_s'])} "
              f"| {gb(r['driver_windows_bytes'])} | {gb(r['driver_search_peak_bytes'])} "
              f"| {gb(r['shard_task_bytes'])} |")
    big = rows
    a_s = fit_exponent([r["clips"] for r in big], [r["shards_total_s"] for r in big])
    out["growth"]["sharded_total_exponent_computed"] = a_s
    print(f"\ncomputed growth of the sharded search from 10^6 to 10^7 clips: ∝ n^{a_s:.2f} (queries ∝ n and shards "
          f"∝ n). Driver peak in search: {bpw:,.0f} B a window vector (measured above, sharded path). One shard "
          f"task: its measured peak RSS plus {per_query} B for every further query (its float32 copy and its "
          "top-k results, from the code; computed)")

    # ---- cache ----
    print("\nFingerprint cache (SQLite), MEASURED at these rows (rows of 30 s clips: frames "
          f"{cache['frames_shape']} float16 + windows {cache['windows_shape']} float16 + scalars):\n")
    print("(database: after a checkpoint; WAL: its size before it, what a run keeps beside the database)\n")
    print("| rows | put_many ms a row | get ms (random row) | frames ms (random row) | database MB | WAL MB "
          "| database bytes a row |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in cache["rows"]:
        print(f"| {r['rows']:,} | {r['put_s_per_row'] * 1e3:.3f} | {r['get_s'] * 1e3:.3f} | "
              f"{r['frames_s'] * 1e3:.3f} | {r['db_bytes'] / 1e6:,.1f} | {r['wal_bytes'] / 1e6:,.1f} "
              f"| {r['bytes_per_row']:,.0f} |")
    print(f"\npayload a row: {cache['payload_bytes_per_row']:,} B (frames + windows, float16)")
    last = cache["rows"][-1]
    print(f"\nEXTRAPOLATED (linear in rows, from {last['rows']:,} rows):\n")
    print("| clips | cache on disk GB | writing it, one core, h | getting every row at the next audit's start, h |")
    print("|---:|---:|---:|---:|")
    ext = []
    for n in targets:
        e = {"clips": n, "disk_bytes": n * last["bytes_per_row"], "put_s": n * last["put_s_per_row"],
             "get_all_s": n * last["get_s"]}
        ext.append(e)
        print(f"| {n:,} | {gb(e['disk_bytes'])} | {hours(e['put_s'])} | {hours(e['get_all_s'])} |")
    out["cache_extrapolated"] = ext

    # ---- cluster ----
    rate = pool["x_real_time_per_core"]
    per_pair = pool["align_s_per_pair"] + 2 * last["frames_s"]
    measured_cands = searches[-1]["candidates"] / searches[-1]["eval_clips"]
    print(f"\nA {CLUSTER_CORES}-core cluster, COMPUTED from the per-core figures measured above: measuring "
          f"{rate:.0f}× real time per core (30 s WAV files); while the cluster measures, the driver writes each "
          f"file's row to the cache ({last['put_s_per_row'] * 1e3:.3f} ms a row, serial), so the measure phase "
          f"takes the longer of the two; shard tasks of one core each, up to {CLUSTER_CORES} at once, then the "
          f"driver's merge; the alignment of at most {MAX_CANDIDATES} candidate pairs per evaluation clip "
          f"({per_pair * 1e3:.2f} ms a pair: align + two frame reads, serial in the driver; the synthetic set "
          f"had {measured_cands:.1f} a clip at {searches[-1]['clips']:,} clips). Ray's per-file streaming "
          "cost and the object store's copies are not included.\n")
    print("| clips | audio h | cluster measuring h | driver cache writes h | measure phase h | search h (shards "
          "in parallel) | driver merge h | alignment h (16 pairs a clip) | total h |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cl = []
    for r, e in zip(big, ext):
        n = r["clips"]
        audio = n * CLIP_SECONDS
        measure = audio / rate / CLUSTER_CORES
        phase = max(measure, e["put_s"])
        waves = math.ceil(r["shards"] / CLUSTER_CORES)
        search = waves * r["per_shard_s"]
        align = round(EVAL_SHARE * n) * MAX_CANDIDATES * per_pair
        total = phase + search + r["driver_merge_s"] + align
        cl.append({"clips": n, "audio_h": audio / 3600, "measure_h": measure / 3600, "cache_h": e["put_s"] / 3600,
                   "measure_phase_h": phase / 3600, "search_h": search / 3600, "merge_h": r["driver_merge_s"] / 3600,
                   "align_max_h": align / 3600, "total_h": total / 3600, "parallel_shards": min(r["shards"],
                                                                                             CLUSTER_CORES)})
        print(f"| {n:,} | {audio / 3600:,.0f} | {hours(measure)} | {hours(e['put_s'])} | {hours(phase)} "
              f"| {hours(search)} ({min(r['shards'], CLUSTER_CORES)} at once) | {hours(r['driver_merge_s'])} "
              f"| {hours(align)} | {hours(total)} |")
    out["cluster"] = cl

if __name__ == "__main__":
    main()
