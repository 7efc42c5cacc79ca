"""`signalchain audit`: a dataset and its splits, checked before any training (no model needed)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from .._units import plural
from ..audio._files import check_path
from ..audio.io import read_audio
from ..audit.cache import default_cache_path
from ..audit.midi_read import is_midi_dataset
from ..audit.midi_run import midi_summary_rows, run_midi_audit
from ..audit.run import AuditResult, run_audit
from ..audit.run import Progress as AuditProgress
from ..errors import SignalchainError, UsageError
from ..report import console
from ..report.audit_page import render_audit
from ..report.progress import Reporter
from ._clock import elapsed
from ._common import common_options, emit, guarded
from ._paths import need_path, need_writable

__all__ = ["audit"]

_SQLITE = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database


class _Bar(AuditProgress):
    """The audit's progress, drawn by the command's `Reporter` (a bar, or a timed line per batch)."""

    def __init__(self, rep: Reporter):
        self.rep = rep
        rep.say("reading")

    def start(self, total: int) -> None:
        self.rep.start(total)
        self.rep.say("measuring")

    def advance(self, n: int) -> None:
        self.rep.advance(n)

    def say(self, what: str) -> None:
        self.rep.say(what)


def _parse_splits(items: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--split {item!r} is not NAME=PATH (e.g. --split train=egs/train/data.jsonl)")
        out.append((name, path))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise UsageError(f"--split names must differ; got {names}")
    return out


def _need_cache(path: str) -> None:
    """--cache names a fingerprint cache signalchain wrote, or a new file: another file there (a typo for
    --stats, a manifest) is a usage error, never set aside as a damaged cache in the user's folder."""
    need_writable(path, option="--cache")
    if not check_path(path).regular:  # a new file (made), or what the cache refuses without opening it
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return  # unreadable: the cache says so, and the audit runs with a temporary one
    if head and head != _SQLITE:
        raise UsageError(f"--cache {path}: not a fingerprint cache (no SQLite header); it is left as it is: "
                         "give a new file name or a cache signalchain wrote")


def _summary(result: AuditResult) -> Table:
    t = Table(title="splits")
    for col in ("split", "examples", "readable", "hours", "mean", "std"):
        t.add_column(col)
    for name, s in result.splits.items():
        seconds = sum(f["seconds"] or 0.0 for f in result.files if f["split"] == name)  # mixed rates add up right
        t.add_row(name, str(s["items"]), str(int(s["clips"])), f"{seconds / 3600:.2f}",
                  f"{s['mean']:.3g}", f"{s['std']:.3g}")
    return t


def _midi_summary(result: AuditResult) -> Table:
    t = Table(title="splits")
    for col in ("split", "pieces", "readable", "notes"):
        t.add_column(col)
    for row in midi_summary_rows(result):
        t.add_row(*row)
    return t


def _listen(result: AuditResult, pairs: int = 3, seconds: float = 8.0) -> list[dict[str, Any]]:
    """Clips of the first flagged pairs, for the HTML page (unreadable ones are skipped)."""
    out = []
    for m in result.matches[:pairs]:
        for side in ("a", "b"):
            try:
                f = read_audio(m[side])
            except SignalchainError:
                continue
            out.append(
                {
                    "label": f"{m[side + '_split']}: {m[side]}",
                    "audio": f.audio[:, : int(seconds * f.sample_rate)],
                    "sample_rate": f.sample_rate,
                    "note": f"{m['kind']}, similarity {m['similarity']}",
                }
            )
    return out


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--split", "splits", multiple=True, metavar="NAME=PATH",
              help="A split to check against the others (repeatable): a manifest, audiofolder or folder.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes decoding and fingerprinting.")
@click.option("--max-caption-tokens", type=int, default=None, help="Flag captions longer than this tokenizer limit.")
@click.option("--stats", "stats_file", type=click.Path(dir_okay=False), default=None,
              help="Normalisation statistics the pipeline uses (JSON/safetensors/npz with mean, std).")
@click.option("--sampler", "sampler_file", type=click.Path(dir_okay=False), default=None,
              help="The training sampler's indices or example ids (JSON, .txt, .npy).")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False), default=None,
              help=f"Fingerprint cache (SQLite) [default: {default_cache_path()}].")
@click.option("--no-cache", is_flag=True, help="Use a temporary cache for this run only.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where files are measured: local worker processes, or Ray tasks (pip install 'signalchain[ray]').")
@click.option("--address", default=None, metavar="ADDR",
              help="With --engine ray: the cluster to join [default: $RAY_ADDRESS, else a local Ray "
                   "of --workers CPUs].")
@click.option("--file-timeout", type=float, default=None, metavar="SECONDS",
              help="With --engine ray: a file measured for longer is named as lost and its worker "
                   "stopped [default: 300].")
@click.option("--retries", type=int, default=None,
              help="A file whose worker (Ray, or --workers ≥ 2) dies 1 + this many times measuring it alone is "
                   "named as lost [default: 2].")
@click.option("--shard-vectors", type=int, default=None, metavar="N",
              help="Window vectors one search index holds before the search is sharded (on Ray: one task a shard) "
                   "[default: 16777216, about 4.8 GB of index].")
@common_options()
@guarded
def audit(paths: tuple[str, ...], splits: tuple[str, ...], workers: int, max_caption_tokens: int | None,
          stats_file: str | None, sampler_file: str | None, cache_path: str | None, no_cache: bool,
          engine: str, address: str | None, file_timeout: float | None, retries: int | None,
          shard_vectors: int | None, json_path: str | None, html_path: str | None, debug: bool) -> int:
    """Audit datasets (AudioCraft manifests, HF audiofolders, folders) and their splits, without a model.

    --engine ray measures the files as Ray tasks, on the cluster at --address or $RAY_ADDRESS (or a
    local Ray): the same findings, with a worker's death or a hung decoder costing only that file.

    Each PATH is a manifest (.jsonl, .jsonl.gz) or a folder; a folder holding train/, valid/, test/
    is audited as those splits. --split NAME=PATH names splits explicitly. A dataset of MIDI files
    (.mid, .midi) gets the MIDI audit: unreadable and empty files, and duplicate, transposed,
    tempo-changed or re-voiced copies across splits.
    """
    named = _parse_splits(splits)
    if not paths and not named:
        raise UsageError("nothing to audit: give a PATH (manifest or folder) or --split NAME=PATH")
    if workers < 1:
        raise UsageError(f"--workers must be ≥ 1, got {workers}")
    if engine != "ray" and (address or file_timeout is not None):
        raise UsageError("--address and --file-timeout apply to --engine ray")
    if file_timeout is not None and not file_timeout > 0:
        raise UsageError(f"--file-timeout must be > 0 seconds, got {file_timeout:g}")
    if shard_vectors is not None and shard_vectors < 1:
        raise UsageError(f"--shard-vectors must be ≥ 1, got {shard_vectors}")
    if retries is not None and retries < 0:
        raise UsageError(f"--retries must be ≥ 0, got {retries}")
    if max_caption_tokens is not None and max_caption_tokens < 1:
        raise UsageError(f"--max-caption-tokens must be ≥ 1, got {max_caption_tokens}")
    for option, path in [*((None, p) for p in paths), *((f"--split {n}=", p) for n, p in named)]:
        need_path(path, option=option, expect="give a manifest (.jsonl, .jsonl.gz) or a folder")
    for option, path in (("--stats", stats_file), ("--sampler", sampler_file)):
        if path is not None:
            need_path(path, option=option, want="file")
    if cache_path is not None and not no_cache:
        _need_cache(cache_path)
    con = console()
    if is_midi_dataset(paths, named):
        if engine == "ray":
            raise UsageError("--engine ray audits audio datasets; a MIDI audit runs here (--workers)")
        return _midi(con, paths, named, workers, max_caption_tokens, stats_file, sampler_file, json_path, html_path)
    cache = None if no_cache else (cache_path or str(default_cache_path()))
    with Reporter("audit") as rep:
        try:
            result = run_audit(paths, named, workers=workers, max_caption_tokens=max_caption_tokens,
                               stats_file=stats_file, sampler_file=sampler_file, cache_path=cache,
                               progress=_Bar(rep), engine=engine, address=address, retries=retries,
                               file_timeout=file_timeout, **({} if shard_vectors is None else
                                                             {"shard_vectors": shard_vectors}))
        except KeyboardInterrupt:
            kept = f"they are kept in the cache {cache}: a re-run measures only the rest" if cache else \
                "nothing is kept (--no-cache)"
            raise SignalchainError(f"interrupted after measuring {rep.done} of {rep.total or 0} files; "
                                   f"{kept}") from None
    if not result.files and not result.findings:  # a typo'd or empty folder must not pass a CI gate
        where = ", ".join([*paths, *(f"{k}={v}" for k, v in named)])
        raise UsageError(f"nothing to audit in {where}: no audio files, manifest rows or MIDI files found there")
    wall = elapsed()  # what the user waited, start-up and imports included (timings: the audit's own parts)
    cached = "no cache" if no_cache else f"{result.cache['hits']} from the cache {result.cache['path']}"
    done = f"{plural(len(result.files), 'example')} in {wall:.1f} s ({cached})"
    title = f"audit · {plural(len(result.files), 'example')}"
    return emit(con, result.findings, title=title, show=[_summary(result), done],
                json_path=json_path, fields=dict(sources=result.sources, splits=result.splits, matches=result.matches,
                                                 files=result.files, search=result.search, cache=result.cache,
                                                 engine=result.engine, timings={**result.timings, "wall": wall}),
                html_path=html_path, page=lambda: render_audit(result.findings, result, _listen(result)))


def _midi(con: Any, paths: tuple[str, ...], named: list[tuple[str, str]], workers: int, max_caption_tokens: int | None,
          stats_file: str | None, sampler_file: str | None, json_path: str | None, html_path: str | None) -> int:
    for flag, value in (("--stats", stats_file), ("--sampler", sampler_file)):
        if value:
            raise UsageError(f"{flag} applies to audio datasets; these are MIDI files")
    with Reporter("audit") as rep:
        result = run_midi_audit(paths, named, workers=workers, max_caption_tokens=max_caption_tokens,
                                progress=_Bar(rep))
    wall = elapsed()
    done = f"{plural(len(result.files), 'MIDI file')} in {wall:.1f} s"
    title = f"audit · {plural(len(result.files), 'MIDI file')}"
    return emit(con, result.findings, title=title, show=[_midi_summary(result), done],
                json_path=json_path, fields=dict(sources=result.sources, splits=result.splits, matches=result.matches,
                                                 files=result.files, search=result.search,
                                                 timings={**result.timings, "wall": wall}),
                html_path=html_path, page=lambda: render_audit(result.findings, result, []))
