"""`run_audit`: the dataset audit on files, streaming and in parallel.

    read sources ──> items ──> (cache hit?) ──> worker processes: sidecar, decode, summary,
                                                  fingerprint ──> judge each item as it arrives
    all items ──> captions across the dataset ──> splits: ids, copies (faiss search + alignment),
                  versions, caches, --stats, --sampler

Nothing an input does stops the run: every broken line or file is one finding naming it. Only the
window vectors stay in memory (float16, 144 bytes a window); frames wait in the cache until an
alignment needs them.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._units import plural
from ..audio._files import display_path
from ..audio.fingerprint import DIM
from ..checks.base import make, run_check
from ..findings import Finding, check_failed, sort_findings
from ..records.audit import STAGE_DATASET, Item, Measure
from .cache import FingerprintCache, file_key
from .inputs import read_sampler, read_stats, sampler_evidence
from .judge_items import judge_captions, judge_item
from .judge_leaks import FittedStats, SplitStats, judge_norm_stats, judge_sampler
from .judge_splits import (
    judge_alternate_versions,
    judge_cache_refs,
    judge_matches,
    judge_shared_ids,
)
from .leakage import Entry, Match, find_matches, train_split
from .measure import LOST, Task
from .pool_engine import RETRIES, dispatch_local
from .search import SHARD_VECTORS, ShardRunner
from .sources import Source, read_items, resolve_sources

__all__ = ["AuditResult", "run_audit", "Progress", "PER_ID_LIMIT"]

PER_ID_LIMIT = 25  # per-file findings of one id listed one by one; the rest are summarised
CHUNK = 16  # items per worker task


class Progress:
    """Called by the audit as it goes; the CLI draws it. No-ops by default."""

    def start(self, total: int) -> None:
        """Called once the number of examples is known."""

    def advance(self, n: int) -> None:
        """Called when n more examples are measured."""

    def say(self, what: str) -> None:
        """Called when the audit moves on to another phase."""


@dataclass
class AuditResult:
    findings: list[Finding]
    sources: list[dict[str, Any]]
    splits: dict[str, dict[str, Any]]
    files: list[dict[str, Any]]
    matches: list[dict[str, Any]]
    search: dict[str, float] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=lambda: {"engine": "local"})


def _cap(findings: list[Finding]) -> list[Finding]:
    """Keep PER_ID_LIMIT per-file findings of each (id, severity); summarise the rest in one."""
    counts: Counter[tuple[str, str]] = Counter()
    rest: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    out = []
    for f in findings:
        key = (f.id, f.severity.value)
        if f.stage == STAGE_DATASET and "path" in f.evidence:
            counts[key] += 1
            if counts[key] > PER_ID_LIMIT:
                rest[key].append(f)
                continue
        out.append(f)
    for (fid, sev), more in rest.items():
        out.append(make(fid, sev, STAGE_DATASET, f"and {len(more)} more files with {fid}, e.g. {more[0].message}",
                        "audit.items", hint=more[0].hint, paths=[f.evidence["path"] for f in more]))
    return out


def _read_sources(sources: Sequence[Source], findings: list[Finding]) -> list[Item]:
    items: list[Item] = []
    for source in sources:
        got: list[Item] = []
        try:
            for x in read_items(source):
                (findings.append if isinstance(x, Finding) else got.append)(x)  # type: ignore[arg-type]
        except Exception as exc:  # a source broken in a way nobody foresaw: what was read counts
            shown = display_path(source.path)
            findings.append(make("manifest.invalid", "error", STAGE_DATASET,
                                 f"{shown}: reading stopped after {len(got)} examples ({type(exc).__name__}: "
                                 f"{str(exc)[:200]})", "audit.sources", hint="fix the source; the examples read "
                                 "before the stop are audited", manifest=shown))
        if source.kind == "folder" and not any(i.sidecar and Path(i.sidecar).is_file() for i in got):
            for i in got:  # a plain folder without any sidecar has no metadata convention to miss
                i.sidecar = None
        items += got
    return items


class _Collector:
    """Takes each measured item as it arrives (in any order), judges it, stores new fingerprints,
    and keeps what the cross-split stage needs, keyed by item number so that the report is laid out
    in manifest order whatever the scheduling."""

    def __init__(self, cache: FingerprintCache, keys: dict[str, tuple[int, int]], cached: dict[int, Measure],
                 max_caption_tokens: int | None):
        self.cache, self.keys, self.cached, self.max_tokens = cache, keys, cached, max_caption_tokens
        self.per_item: dict[int, list[Finding]] = {}
        self.kept: dict[int, tuple[Entry, np.ndarray, str]] = {}
        self.files: dict[int, dict[str, Any]] = {}
        self.captions: dict[int, tuple[Item, str]] = {}
        self.sums: dict[int, tuple[str, int, float, float]] = {}  # item -> its split's sums (added in order)
        self.fresh: list[tuple[str, tuple[int, int], Measure]] = []

    def take(self, n: int, item: Item, m: Measure | None) -> None:
        if m is None:  # not decoded in the worker: from the cache, or a file that is not there
            m = self.cached.get(n) or (Measure(problem="missing") if item.path and item.path not in self.keys else None)
        self.per_item[n] = run_check("audit.items", judge_item, item, m, self.max_tokens)
        if m is not None and n not in self.cached and item.path in self.keys and not (m.problem or "").startswith(LOST):
            # silent and unreadable files too; a lost one is measured again next time
            self.fresh.append((item.path, self.keys[item.path], m))
            if len(self.fresh) >= 256:
                self.flush()
        ok = m is not None and not m.problem
        self.files[n] = {"path": item.ref, "split": item.split, "line": item.line, "problem": m.problem if m else None,
                         "seconds": round(m.seconds, 3) if ok else None, "sample_rate": m.sample_rate if ok else None,
                         "channels": m.channels if ok else None, "caption": item.caption,
                         "rms_dbfs": round(m.summary.get("rms_dbfs", 0.0), 1) if ok else None}
        if not ok:
            return
        self.captions[n] = (item, m.audio_hash)
        if not m.summary.get("nonfinite_fraction"):  # NaN statistics say nothing about where they came from
            self.sums[n] = (item.split, m.samples, m.total, m.total_sq)
        entry = Entry(item.split, item.ref, item.where, m.audio_hash, m.seconds, m.fp is None or m.fp.silent,
                      item.source_id, item.title, item.artist, item.cache_refs, item.cache_hashes)
        windows = np.zeros((0, DIM), np.float16) if m.fp is None else m.fp.windows.astype(np.float16)
        self.kept[n] = (entry, windows, item.path or "")

    def flush(self) -> None:
        if self.fresh:
            self.cache.put_many(self.fresh)
            self.fresh.clear()

    @property
    def stats(self) -> dict[str, SplitStats]:
        """Each split's sums, added in manifest order: the same floats whatever order the workers finished in."""
        out: dict[str, SplitStats] = defaultdict(SplitStats)
        for n in sorted(self.sums):
            split, samples, total, total_sq = self.sums[n]
            out[split].add(samples, total, total_sq)
        return out

    def item_findings(self) -> list[Finding]:
        return [f for n in sorted(self.per_item) for f in self.per_item[n]]


def _cross_split(sink: _Collector, cache: FingerprintCache, workers: int, fitted: FittedStats | None,
                 sampled: list[int] | list[str] | None, sampler_file: str | None, progress: Progress,
                 shard_vectors: int, run_shards: ShardRunner | None,
                 ) -> tuple[list[Finding], list[Entry], list[Match], dict[str, float]]:
    order = sorted(sink.kept)
    entries = [sink.kept[n][0] for n in order]
    windows = [sink.kept[n][1] for n in order]
    paths_of = [sink.kept[n][2] for n in order]
    out = run_check("audit.captions", judge_captions, [sink.captions[n] for n in sorted(sink.captions)])
    progress.say("searching for the same audio across splits")
    try:
        matches, search = find_matches(entries, windows, lambda i: cache.frames(paths_of[i]),
                                       threads=max(1, workers), progress=progress.say, shard_vectors=shard_vectors,
                                       run_shards=run_shards)
    except Exception as exc:  # the search failing is one finding; the per-file results stand
        out.append(check_failed("audit.search", exc))
        matches, search = [], {}
    out += run_check("audit.shared_ids", judge_shared_ids, entries)
    for name, fn in (("matches", judge_matches), ("alternate_versions", judge_alternate_versions),
                     ("cache_refs", judge_cache_refs)):
        out += run_check(f"audit.{name}", fn, entries, matches)
    sizes = dict(Counter(e.split for e in entries))
    train = train_split(sizes) if sizes else "train"
    if fitted is not None:
        out += run_check("audit.norm_stats", judge_norm_stats, fitted, sink.stats, train)
    if sampled is not None:
        ev = sampler_evidence(sampled, entries, train, f"--sampler {Path(sampler_file or '').name}")
        out += run_check("audit.sampler", judge_sampler, ev)
    return out, entries, matches, search


def run_audit(paths: Sequence[str] = (), splits: Sequence[tuple[str, str]] = (), *, workers: int = 1,
              max_caption_tokens: int | None = None, stats_file: str | None = None,
              sampler_file: str | None = None, cache_path: str | Path | None = None,
              progress: Progress | None = None, engine: str = "local", address: str | None = None,
              retries: int | None = None, file_timeout: float | None = None,
              shard_vectors: int = SHARD_VECTORS) -> AuditResult:
    """Audit the datasets at `paths` and the named `splits` (NAME, PATH); see the module docstring.

    `engine="ray"` measures the files as Ray tasks (`ray_engine`): on the cluster at `address` (or
    $RAY_ADDRESS), else on a local Ray of `workers` CPUs; `retries` and `file_timeout` bound what one
    file may cost there, and a search past `shard_vectors` indexed vectors runs its shards as Ray
    tasks. The findings do not depend on the engine."""
    if engine not in ("local", "ray"):
        raise ValueError(f"engine must be 'local' or 'ray', got {engine!r}")
    t0 = time.perf_counter()
    progress = progress or Progress()
    fitted = read_stats(stats_file) if stats_file else None  # bad option files fail before any work
    sampled = read_sampler(sampler_file) if sampler_file else None
    sources = resolve_sources(paths, splits)
    findings: list[Finding] = []
    items = _read_sources(sources, findings)
    progress.start(len(items))
    cache = FingerprintCache(cache_path)
    session: tuple[Any, bool, str] | None = None  # Ray, whether this audit started it, where
    run_shards: ShardRunner | None = None
    try:
        if cache.note:
            findings.append(make("audit.cache", "info", None, cache.note, "audit.cache"))
        cached: dict[int, Measure] = {}
        keys: dict[str, tuple[int, int]] = {}
        pending: list[Task] = []
        for n, item in enumerate(items):
            key = file_key(item.path) if item.path else None
            hit = cache.get(item.path, key) if key and item.path else None
            if key and item.path:
                keys[item.path] = key
            if hit is not None:
                cached[n] = hit
            pending.append((n, item, hit is None and item.path is not None))  # a missing path: measure names why
        sink = _Collector(cache, keys, cached, max_caption_tokens)
        chunks = [pending[i : i + CHUNK] for i in range(0, len(pending), CHUNK)]
        try:
            if engine == "ray" and chunks:  # nothing to measure starts no cluster
                from .ray_engine import FILE_TIMEOUT, connect, dispatch_ray, shard_runner

                progress.say(f"measuring {plural(len(items), 'example')} ({len(cached)} from the cache) on Ray")
                session = connect(address, workers)
                retries = RETRIES if retries is None else retries
                ran = dispatch_ray(session[0], session[2], chunks, sink.take, progress, retries=retries,
                                   file_timeout=FILE_TIMEOUT if file_timeout is None else file_timeout)
                engine_info = ran.as_dict()
                run_shards = shard_runner(session[0], retries)
            else:
                progress.say(f"measuring {plural(len(items), 'example')} ({len(cached)} from the cache) with "
                             f"{plural(workers, 'worker')}")
                engine_info = dispatch_local(chunks, workers, sink.take, progress,
                                             RETRIES if retries is None else retries)
        finally:
            sink.flush()  # Ctrl-C or a failure: what was measured is kept for the next run
        if cache.damaged_rows:
            findings.append(make("audit.cache", "info", None, f"{cache.damaged_rows} damaged rows of the fingerprint "
                                 f"cache {display_path(cache.path)} were ignored; those files were measured again",
                                 "audit.cache", damaged_rows=cache.damaged_rows))
        t1 = time.perf_counter()
        findings += sink.item_findings()
        more, entries, matches, search = _cross_split(sink, cache, workers, fitted, sampled, sampler_file, progress,
                                                      shard_vectors, run_shards)
        findings += more
        cache_info = {"path": display_path(cache.path), "hits": len(cached), "measured": len(items) - len(cached)}
        t2 = time.perf_counter()  # before a local Ray's shutdown, which is neither measuring nor searching
    finally:
        cache.close()
        if session is not None and session[1]:
            session[0].shutdown()  # the local Ray this audit started (a joined cluster is only left)
    counts = Counter(i.split for i in items)
    return AuditResult(
        findings=sort_findings(_cap(findings)),
        sources=[{"split": s.split, "path": display_path(s.path), "kind": s.kind} for s in sources],
        splits={s: {**st.figures(), "items": counts[s]} for s, st in sink.stats.items()},
        files=[sink.files[n] for n in sorted(sink.files)],
        matches=[{"kind": m.kind, "a": entries[m.a].ref, "a_split": entries[m.a].split, "b": entries[m.b].ref,
                  "b_split": entries[m.b].split, "similarity": round(m.similarity, 4), "coverage": round(m.coverage, 3),
                  "overlap_s": round(m.overlap_seconds, 2), "lag_s": round(m.lag_seconds, 3)} for m in matches],
        search=search, cache=cache_info, engine=engine_info,
        timings={"measure": t1 - t0, "search": t2 - t1, "total": time.perf_counter() - t0})
