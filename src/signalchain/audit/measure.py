"""Measure one example: decode its audio, summarise it, fingerprint it, read its sidecar.

Everything here runs in worker processes during a file audit and in the doctor's process for
in-memory splits; it never raises for bad input: a broken file becomes `Measure.problem`, a broken
sidecar becomes `Item.sidecar_state`.
"""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np

from ..audio._files import check_path, has_surrogates, read_regular, sha1_regular
from ..audio.fingerprint import MAX_RATE, MIN_RATE, audio_hash, fingerprint
from ..audio.measure import decode_file
from ..errors import SignalchainError
from ..records.audit import MUSICINFO_REQUIRED, Item, Measure
from ..stats import CLIP_LEVEL, SILENCE_DBFS, to_dbfs
from .rows import loads_json

__all__ = ["measure_audio", "measure_example", "measure_batch", "read_sidecar", "hash_cache_refs", "quick_summary",
           "Task", "LOST", "TIMED_OUT", "INJECT_ENV", "inject_fault"]

_FRAME_SECONDS = 0.02
LOST = "lost: "  # the problem of a file no worker could finish (an engine's finding; never cached)
TIMED_OUT = LOST + "timeout: "  # ... one stopped after --file-timeout: a single slow try, not proof of a bad file

Task = tuple[int, Item, bool]  # (number, item, decode it?)
SIDECAR_LIMIT = 16 << 20  # bytes: a MusicInfo sidecar is a few hundred; past this it is not one


def quick_summary(x: np.ndarray, sample_rate: int) -> tuple[dict[str, float | None], np.ndarray]:
    """The level, silence, clipping, DC and channel figures of `stats.audio_example_summary`, in
    float32 (about 10× faster on long files), and the mono mixdown `[T]` (float32)."""
    channels, length = x.shape
    finite = np.isfinite(x)
    nonfinite = 0.0 if finite.all() else 1.0 - float(finite.mean())
    if nonfinite:
        x = np.where(finite, x, np.float32(0.0))
    m = x.mean(axis=0) if channels > 1 else x[0]
    magnitude = np.abs(x)
    sq = x * x
    energy = float(sq.sum(dtype=np.float64)) / x.size
    frame = max(1, int(round(_FRAME_SECONDS * sample_rate)))
    n_frames = max(1, length // frame)
    usable = sq[:, : n_frames * frame] if length >= frame else sq
    per_frame = usable.shape[1] // n_frames
    frame_energy = usable.reshape(channels, n_frames, per_frame).sum(axis=(0, 2), dtype=np.float64) / (
        channels * per_frame
    )
    dc = x.mean(axis=1, dtype=np.float64)
    out: dict[str, float | None] = {
        "rms_dbfs": to_dbfs(math.sqrt(energy)),
        "peak": float(magnitude.max()),
        "dc": float(dc[np.argmax(np.abs(dc))]),
        "silence_fraction": float(np.mean(frame_energy < 10.0 ** (SILENCE_DBFS / 10.0))),
        "clipping_fraction": float(np.count_nonzero(magnitude >= CLIP_LEVEL)) / x.size,
        "nonfinite_fraction": nonfinite,
        "mono_energy_db": None,
    }
    if channels > 1 and energy > 0:
        mono_energy = float(np.square(m).sum(dtype=np.float64)) / length
        out["mono_energy_db"] = 10.0 * math.log10(max(mono_energy, 1e-30) / energy)
    return out, m


def measure_audio(audio: np.ndarray, sample_rate: int, with_fingerprint: bool = True) -> Measure:
    """Summary, exact hash, sums for normalisation statistics and fingerprint of `[C, T]` audio."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2:
        return Measure(problem=f"unreadable: audio must be [C, T], got shape {list(x.shape)}")
    rate = int(sample_rate)
    if not MIN_RATE <= rate <= MAX_RATE:  # before any allocation that scales with the rate
        return Measure(problem=f"sample rate: {rate} Hz is outside {MIN_RATE:,}-{MAX_RATE:,} Hz (no music is "
                               "recorded there: the header is wrong, or the file is not audio)",
                       sample_rate=rate, channels=int(x.shape[0]), samples=int(x.shape[1]))
    if x.shape[1] == 0:
        return Measure(problem="empty: 0 samples", sample_rate=rate, channels=int(x.shape[0]))
    summary, m = quick_summary(x, rate)
    # The exact hash is of the mono mixdown: what a mono model trains on, and the same bytes for a
    # mono clip whether a loader hands it over as [1, T] or repeated to [2, T].
    return Measure(sample_rate=rate, channels=int(x.shape[0]), samples=int(x.shape[1]),
                   summary=summary, total=float(m.sum(dtype=np.float64)),
                   total_sq=float(np.square(m).sum(dtype=np.float64)),
                   audio_hash=audio_hash(m), fp=fingerprint(m, rate) if with_fingerprint else None)


def measure_example(path: str, with_fingerprint: bool = True) -> Measure:
    """Decode `path` (any format libsndfile reads) and measure it; problems are returned, not raised.

    The path is looked at before anything opens it: a FIFO, device or folder is never opened, a
    symlink loop or a dangling link is named. Decoding reads what the file holds, whatever its
    header claims (a claim beyond that is kept in `frames_claimed`)."""
    state = check_path(path)
    if state.kind == "missing":
        return Measure(problem="missing" if state.detail == "no such file" else f"missing: {state.detail}")
    if state.kind == "not_regular":
        return Measure(problem=f"not regular: {state.detail}")
    if not state.regular:
        return Measure(problem=f"unreadable: {state.detail}")
    if state.size == 0:
        return Measure(problem="empty: the file has 0 bytes")
    af, why = decode_file(path)  # a corrupt or unsupported file is a finding, never a crash
    if af is None:
        why = why or ""
        if why.startswith("unreadable audio (") and why.endswith(")"):
            why = why[len("unreadable audio ("):-1]
        return Measure(problem=f"unreadable: {why}")
    m = measure_audio(af.audio, af.sample_rate, with_fingerprint)
    if af.truncated:
        m.frames_claimed = int(af.frames_claimed or 0)
        m.read_error = af.read_error
    return m


def _parse_json(raw: bytes) -> tuple[object, str | None]:
    """The JSON value of `raw`, or why it is not one (never raises)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 at byte {exc.start}"
    return loads_json(text, multiline=True)


def read_sidecar(item: Item) -> None:
    """Read the item's AudioCraft sidecar JSON (if its format has one) into the item."""
    if item.sidecar is None:
        return
    state = check_path(item.sidecar)
    if state.kind == "missing":
        item.sidecar_state = "missing"
        return
    if not state.regular:
        item.sidecar_state = f"unreadable: {state.detail}" + (
            ", not a regular file" if state.kind == "not_regular" else ""
        )
        return
    try:
        raw = read_regular(item.sidecar, SIDECAR_LIMIT)
    except SignalchainError as exc:
        item.sidecar_state = f"unreadable: {str(exc).split(': ', 1)[-1]}"
        return
    meta, why = _parse_json(raw)
    if why is None and not isinstance(meta, dict):
        why = f"a JSON {type(meta).__name__}, not an object"
    if why is None and any(has_surrogates(s) for s in _strings(meta)):
        why = "holds a lone surrogate escape (\\udXXX): not text any UTF-8 reader or tokenizer accepts"
    if why is not None:
        item.sidecar_state = f"unreadable: {why}"
        return
    assert isinstance(meta, dict)
    item.sidecar_state = "ok"
    item.missing_fields = [k for k in MUSICINFO_REQUIRED if k not in meta]
    item.take_metadata(meta)


def _strings(value: object) -> list[str]:
    """Every key and string value inside a JSON value (iteratively: any depth)."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out += [k for k in v if isinstance(k, str)]
            stack += list(v.values())
        elif isinstance(v, list):
            stack += v
    return out


def hash_cache_refs(item: Item) -> None:
    """Content hashes of the feature-cache files the item points at (missing, unreadable and
    non-regular ones hash to ''; a FIFO or device is never opened)."""
    hashes = []
    for ref in item.cache_refs:
        try:
            hashes.append(sha1_regular(ref))
        except (SignalchainError, OSError):
            hashes.append("")
    item.cache_hashes = hashes


INJECT_ENV = "SIGNALCHAIN_AUDIT_INJECT"


def inject_fault(spec: str, path: str) -> None:
    """Put the fault of SIGNALCHAIN_AUDIT_INJECT into this worker when it reaches `path`: `kill:TEXT`
    kills the process (SIGKILL) at a file whose path contains TEXT, `hang:TEXT` makes it sleep there;
    rules are separated by `;`. How the engines' fault rules are proven on real worker processes."""
    for rule in filter(None, (r.strip() for r in spec.split(";"))):
        action, _, text = rule.partition(":")
        if text and text in path:
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif action == "hang":
                time.sleep(10**6)


def measure_batch(batch: list[Task], inject: str = "") -> list[tuple[int, Item, Measure | None]]:
    """In a worker (a process of the local pool, or a Ray task): read each item's sidecar and cache
    hashes; decode and measure where asked. An exception is that item's problem, never the batch's.
    `inject`: the driver's SIGNALCHAIN_AUDIT_INJECT (never applied in the driver's own process)."""
    out = []
    for n, item, measure in batch:
        if inject:
            inject_fault(inject, item.path or "")
        try:
            read_sidecar(item)
            hash_cache_refs(item)
            out.append((n, item, measure_example(item.path) if measure and item.path else None))
        except Exception as exc:  # an input nobody foresaw: this example's finding, not the run's end
            out.append((n, item, Measure(problem=f"unreadable: {type(exc).__name__}: {exc}")))
    return out
