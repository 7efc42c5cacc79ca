"""Helpers of the golden tests: a tiny golden of every kind, and the tools of a forger.

`reseal` recomputes a manifest's self-checksum the way the format documents it (sha256 of the
canonical JSON without the checksum field), written here independently of the library, so that a
test can play a forger who knows the format and still be refused by the checks behind the checksum.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from signalchain import record, tap


def reseal(manifest: dict) -> dict:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return {**body, "manifest_sha256": hashlib.sha256(canon.encode("utf-8")).hexdigest()}


def read_manifest(folder: Path) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))


def write_manifest(folder: Path, manifest: dict, reseal_it: bool = True) -> None:
    text = json.dumps(reseal(manifest) if reseal_it else manifest, indent=1)
    put(Path(folder) / "manifest.json", text.encode("utf-8"))


def file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def refresh_file(folder: Path, rel: str) -> None:
    """Point the manifest at a file's new bytes, as a forger would, and reseal it."""
    m = read_manifest(folder)
    m["files"][rel] = file_sha(Path(folder) / rel)
    write_manifest(folder, m)


def tiny_trace(shift: float = 0.0):
    """Every kind of stage, small enough that hostile tests can afford thousands of loads."""
    rng = np.random.default_rng(0)
    with record(values=True) as t:
        tap("audio.original", (rng.normal(size=(2, 1, 64)) * 0.1 + shift).astype(np.float32), sample_rate=800)
        tap("caption", ["a low drone", "a bright bell"])
        tap("metadata", [{"id": "x-0", "bpm": 90}, {"id": "x-1", "bpm": 120}])
        tap("tokens", rng.integers(0, 16, size=(2, 2, 4)), cardinality=16)
        tap("mask.loss", np.ones((2, 2, 4), dtype=bool))
        tap("logits", rng.normal(size=(2, 2, 4, 3)).astype(np.float16))
        tap("loss", 2.5 + shift)
    return t


def judge(folder: Path, original_manifest: dict, original_trace, resealed: bool = False) -> str:
    """The outcome of loading a golden someone may have tampered with: 'refused' (a GoldenFileError
    naming a file of that golden) or 'identical' (a clean load of exactly the original content).
    Any other exception, or a clean load of anything else, fails the calling test. `resealed`: the
    forger refreshed file hashes and the manifest's checksum, which then differ legitimately."""
    from signalchain import GoldenFileError, compare_traces, load_golden

    try:
        g = load_golden(folder)
    except GoldenFileError as exc:
        msg = str(exc)
        assert msg.startswith(str(folder)), msg  # names the file (or the folder) it refuses
        assert "\n" not in msg, msg
        return "refused"
    ignored = ("files", "manifest_sha256") if resealed else ()
    assert {k: v for k, v in g.manifest.items() if k not in ignored} == {
        k: v for k, v in original_manifest.items() if k not in ignored}, "tampered manifest loaded as if true"
    assert [(r.name, r.kind, r.dtype, r.shape) for r in g.trace] == [
        (r.name, r.kind, r.dtype, r.shape) for r in original_trace]
    assert compare_traces(original_trace, g.trace).identical, "tampered values loaded as if true"
    return "identical"


def report(name: str, counts) -> None:
    """One line per hostile class, read by whoever runs the suite with -s."""
    print(
        f"\nHOSTILE {name}: {sum(counts.values())} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )


def put(path: Path, data: bytes) -> None:
    """Overwrite a file in place. (`write_bytes` truncates to zero first, which ext4 answers with a
    flush of the file: thousands of hostile cases would spend seconds waiting on the disk.)"""
    path = Path(path)
    if not path.is_file() or path.is_symlink():
        path.write_bytes(data)
        return
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
