"""Fixtures of the golden tests: a tiny golden of every kind, and the tools of a forger.

`forge.reseal` recomputes a manifest's self-checksum the way the format documents it (sha256 of the
canonical JSON without the checksum field), written here independently of the library, so that a
test can play a forger who knows the format and still be refused by the checks behind the checksum.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from signalchain import record, save_golden, tap


def _reseal(manifest: dict) -> dict:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return {**body, "manifest_sha256": hashlib.sha256(canon.encode("utf-8")).hexdigest()}


def _read(folder: Path) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))


def _write(folder: Path, manifest: dict, reseal: bool = True) -> None:
    text = json.dumps(_reseal(manifest) if reseal else manifest, indent=1)
    (Path(folder) / "manifest.json").write_text(text, encoding="utf-8")


def _file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _refresh_file(folder: Path, rel: str) -> None:
    """Point the manifest at a file's new bytes, as a forger would, and reseal it."""
    m = _read(folder)
    m["files"][rel] = _file_sha(Path(folder) / rel)
    _write(folder, m)


@pytest.fixture
def forge():
    return SimpleNamespace(reseal=_reseal, read=_read, write=_write, file_sha=_file_sha, refresh_file=_refresh_file)


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


@pytest.fixture
def tiny(tmp_path):
    """(folder, trace) of a saved tiny golden."""
    trace = tiny_trace()
    path = save_golden(tmp_path / "tiny", trace, {"seed": 0, "pipeline": "tiny", "pipeline_spec": None})
    return path, trace
