"""Audit throughput on this machine: the local engine and the Ray engine, 1 and 2 CPUs, measured in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_audit_ray.py [--quick] [--clips 1200] [--json out.json]

What is measured: a synthetic AudioCraft dataset (clips of the reference data generator, 10-30 s of
32 kHz stereo PCM_16 WAV, lengths drawn uniformly; a train/ and a valid/ split, the valid split holding
a few planted copies of training clips so that the cross-split search has something to find) is
written to a temporary folder and audited with `run_audit(splits=..., cache_path=None)` (no cache: every
file is decoded and fingerprinted) by

- the local engine with 1 worker (in-process) and with 2 worker processes;
- the Ray engine with 1 and 2 CPUs (`engine="ray", workers=N` starts a local Ray of N CPUs);
- the Ray engine with 2 CPUs and a small `shard_vectors`, so that the search runs as Ray shard tasks
  (a check that the sharded search finds what one index finds; its search time is not comparable).

For each: the measure phase's wall time (`result.timings["measure"]`: reading the manifests, decoding,
fingerprinting; for Ray it includes starting the local Ray), the whole audit's wall time, files/s,
audio seconds per wall second (× real time) and per core, and the ratio to the local 1-worker run.
Ray's fixed start-up is measured separately (`ray.init` of a fresh local Ray, the first trivial task,
the first task that imports signalchain and measures one clip, `ray.shutdown`; and, for comparison, a
local spawn pool of 2 processes), and the Ray runs are also shown by the engine's own dispatch clock
(`result.engine["seconds"]`, from the connected Ray to the last file) so that the per-file rate is not
hidden by the start-up. Each configuration runs `--repeats` times, interleaved; the fastest is shown
(every repeat is in the JSON).
Every engine's findings, matches and split figures are compared with the local 1-worker run's.

Files are read from the page cache (they were just written): disk reads are not part of the figures.
All runs share the machine's cores with whatever else runs on it; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from signalchain.audit.run import AuditResult, run_audit
from signalchain.reference.data import generate_clip, write_audiocraft_dataset

SR = 32000
SEED = 29
RAY_KWARGS: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def write_dataset(root: Path, clips: int, rng: np.random.Generator) -> tuple[dict[str, Path], float]:
    """train/ and valid/ AudioCraft datasets of `clips` clips in all (about 1 in 9 in valid, 1 in 4 of
    those a gain-changed copy of a training clip); returns the manifests and the audio seconds."""
    n_valid = max(4, clips // 9)
    n_train = clips - n_valid
    lengths = rng.uniform(10.0, 30.0, size=clips)
    train = [generate_clip(i, SEED, SR, seconds=float(lengths[i])) for i in range(n_train)]
    valid = []
    copies = set(rng.choice(n_train, size=max(1, n_valid // 4), replace=False).tolist())
    for j in range(n_valid):
        if copies:
            src = train[copies.pop()]
            sid = f"v-copy-{j:04d}"
            valid.append(replace(src, audio=(src.audio * 0.5).astype(np.float32), source_id=sid,
                                 metadata={**src.metadata, "name": sid, "source_id": sid}))
        else:
            valid.append(generate_clip(n_train + j, SEED, SR, seconds=float(lengths[n_train + j])))
    manifests = {"train": write_audiocraft_dataset(train, root / "train"),
                 "valid": write_audiocraft_dataset(valid, root / "valid")}
    seconds = sum(c.audio.shape[-1] / SR for c in train + valid)
    return manifests, seconds


def _measure_one() -> float:
    """A Ray task's first real work: import the audit's per-file code and measure 1 s of audio."""
    from signalchain.audit.measure import measure_audio

    measure_audio(np.zeros((2, SR), np.float32) + 0.1, SR)
    return time.time()


def ray_startup(cpus: int) -> dict[str, float]:
    """Seconds of a fresh local Ray: init, first trivial task, first signalchain task, shutdown."""
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, **RAY_KWARGS)
    t_init = time.perf_counter()
    try:
        ray.get(ray.remote(num_cpus=1)(lambda: 1).remote())
        t_task = time.perf_counter()
        ray.get(ray.remote(num_cpus=1)(_measure_one).remote())
        t_measure = time.perf_counter()
    finally:
        ray.shutdown()
    t_end = time.perf_counter()
    return {"init": t_init - t0, "first_task": t_task - t_init, "first_measure_task": t_measure - t_task,
            "shutdown": t_end - t_measure, "start": t_measure - t0}


def _pool_start(n: int) -> None:
    """What the local engine's pool pays before its first file: spawn `n` processes that import signalchain."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_measure_one_arg, range(n)))


def _measure_one_arg(_: int) -> float:
    return _measure_one()


def _comparable(res: AuditResult) -> dict[str, Any]:
    return {"findings": [f.to_dict() for f in res.findings], "matches": res.matches, "splits": res.splits,
            "files": res.files}


def audit(manifests: dict[str, Path], engine: str, workers: int, **kw: Any) -> tuple[AuditResult, float]:
    t0 = time.perf_counter()
    res = run_audit(splits=[(s, str(p)) for s, p in manifests.items()], workers=workers, engine=engine,
                    cache_path=None, **kw)
    return res, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 clips (a smoke run)")
    ap.add_argument("--clips", type=int, default=1200, help="clips in the dataset (default 1200, about 3 GB)")
    ap.add_argument("--dir", help="where to write the dataset (default: a temporary folder, deleted at the end)")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats; the fastest is shown (default 2)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    args = ap.parse_args()
    clips = 40 if args.quick else args.clips
    args.repeats = 1 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-audit-ray-"))
    out: dict[str, Any] = {"clips": clips, "cores": os.cpu_count(), "load_average_start": os.getloadavg()}
    try:
        t0 = time.perf_counter()
        manifests, seconds = write_dataset(root, clips, rng)
        size = sum(f.stat().st_size for f in root.rglob("*.wav"))
        out.update(audio_seconds=seconds, wav_bytes=size, write_seconds=time.perf_counter() - t0)
        print(f"dataset: {clips} clips, {seconds:,.0f} s of 32 kHz stereo audio ({seconds / clips:.1f} s a clip), "
              f"{size / 1e9:.2f} GB of WAV, written in {out['write_seconds']:.0f} s to {root}")
        audit({"valid": manifests["valid"]}, "local", 1)  # warm-up: imports, FFT plans (not timed)

        startup = {n: ray_startup(n) for n in (1, 2)}
        t = time.perf_counter()
        _pool_start(2)
        pool_start = time.perf_counter() - t
        out.update(ray_startup=startup, local_pool_start_2=pool_start)
        runs: list[tuple[str, str, int, dict[str, Any], int]] = [
            ("local, 1 worker", "local", 1, {}, 1), ("local, 2 workers", "local", 2, {}, 2),
            ("ray, 1 CPU", "ray", 1, {}, 1), ("ray, 2 CPUs", "ray", 2, {}, 2),
            ("ray, 2 CPUs, search in shards of 4096 vectors", "ray", 2, {"shard_vectors": 4096}, 2)]
        best: dict[str, dict[str, Any]] = {}
        base: dict[str, Any] | None = None
        for rep in range(args.repeats):  # interleaved, so that a burst of other work hits every engine alike
            for name, engine, workers, kw, cores in runs:
                res, wall = audit(manifests, engine, workers, **kw)
                same = _comparable(res)
                if base is None:
                    base = same
                equal = same == base
                measure = res.timings["measure"]
                row = {"run": name, "engine": engine, "cpus": cores, "repeat": rep, "measure_s": measure,
                       "search_s": res.timings["search"], "total_s": res.timings["total"], "wall_s": wall,
                       "files_per_s": clips / measure, "x_real_time": seconds / measure,
                       "x_real_time_per_core": seconds / measure / cores, "findings": len(res.findings),
                       "matches": len(res.matches), "same_as_local_1": equal, "engine_info": res.engine,
                       "search_stats": res.search}
                if engine == "ray":
                    dispatch = float(res.engine["seconds"])
                    row.update(dispatch_s=dispatch, ray_start_in_run_s=measure - dispatch,
                               steady_files_per_s=clips / dispatch,
                               steady_x_real_time_per_core=seconds / dispatch / cores)
                out.setdefault("all_runs", []).append(row)
                print(f"  {name} (repeat {rep + 1}): measure {measure:.2f} s, total {res.timings['total']:.2f} s, "
                      f"{len(res.findings)} findings, {len(res.matches)} matches, same as local 1-worker: {equal}")
                if name not in best or measure < best[name]["measure_s"]:
                    best[name] = row
        rows = [best[r[0]] for r in runs]
        t1 = rows[0]["measure_s"]
        for r in rows:
            r["ratio_to_local_1"] = t1 / r["measure_s"]
            if "dispatch_s" in r:
                r["steady_ratio_to_local_1"] = t1 / r["dispatch_s"]
        out["runs"] = rows
        out["all_equal"] = all(r["same_as_local_1"] for r in out["all_runs"])
        out["load_average_end"] = os.getloadavg()

        print(f"\n{clips} files, {seconds:,.0f} s of audio; the fastest of {args.repeats} interleaved repeats; "
              f"load average at start {out['load_average_start'][0]:.2f}, at end {out['load_average_end'][0]:.2f} "
              f"on {os.cpu_count()} cores\n")
        print("| run | measure s | search s | total s | files/s | × real time | × real time per core "
              "| speed-up vs local 1 | findings equal |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['run']} | {r['measure_s']:.2f} | {r['search_s']:.2f} | {r['total_s']:.2f} "
                  f"| {r['files_per_s']:.1f} | {r['x_real_time']:.0f} | {r['x_real_time_per_core']:.0f} "
                  f"| {r['ratio_to_local_1']:.2f} | {'yes' if r['same_as_local_1'] else 'NO'} |")
        print(f"\nfindings, matches, split figures and per-file rows equal to the local 1-worker run's in every "
              f"run and repeat: {out['all_equal']}")
        print("\nFixed start-up costs, measured on their own:\n")
        print("| what | seconds |")
        print("|---|---:|")
        for n, s in startup.items():
            print(f"| fresh local Ray of {n} CPU{'s' if n > 1 else ''}: ray.init | {s['init']:.2f} |")
            print(f"| ... first trivial task (a worker started) | {s['first_task']:.2f} |")
            print(f"| ... first task importing signalchain, measuring 1 s of audio | {s['first_measure_task']:.2f} |")
            print(f"| ... start-up in all | {s['start']:.2f} |")
            print(f"| ... ray.shutdown | {s['shutdown']:.2f} |")
        print(f"| local engine: a spawn pool of 2 processes importing signalchain, one task each "
              f"| {pool_start:.2f} |")
        print("\nRay runs without Ray's start-up: the engine's own dispatch clock (`result.engine['seconds']`: from "
              "the connected Ray to the last file, worker start included):\n")
        print("| run | measure s | of which Ray start (measure − dispatch) | dispatch s | files/s "
              "| × real time per core | speed-up vs local 1 |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "dispatch_s" in r:
                print(f"| {r['run']} | {r['measure_s']:.2f} | {r['ray_start_in_run_s']:.2f} | {r['dispatch_s']:.2f} "
                      f"| {r['steady_files_per_s']:.1f} | {r['steady_x_real_time_per_core']:.0f} "
                      f"| {r['steady_ratio_to_local_1']:.2f} |")
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
