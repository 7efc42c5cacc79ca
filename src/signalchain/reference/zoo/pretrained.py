"""Pretrained starts: each bed trained once to a low loss, saved, and fine-tuned from there.

Nearly every real user fine-tunes a pretrained model rather than training from scratch, and a
pretrained model is where a check that assumes a fresh model misfires (a low initial loss, trained
norms, a frozen-but-trained text encoder). The pre-training is short (about a minute per bed on a
CPU core) and deterministic: one seed, one thread, the bed's own `train_step` on its own loader.

The weights are cached with safetensors in `$XDG_CACHE_HOME/signalchain/` (else
`~/.cache/signalchain/`), keyed by a hash of what made them (the bed, its config, the recipe, the
number of steps, signalchain's version), written atomically (a temporary file, fsync, rename), and
checked on load: the file's metadata must carry the key and a sha256 of every tensor's bytes; a
missing, damaged or foreign file is rebuilt. A lock file keeps parallel workers from building the
same start twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import signalchain

__all__ = ["PretrainSpec", "cache_dir", "pretrained_state", "cache_path"]


@dataclass(frozen=True)
class PretrainSpec:
    """How a bed is pre-trained: `make()` builds the bed pipeline, `steps` updates of its own
    `train_step` on `loader("train", seed=0)` from `build_model(0)`."""

    bed: str
    make: Callable[[], Any]
    config: dict[str, Any]
    steps: int

    @property
    def key(self) -> str:
        blob = json.dumps({"bed": self.bed, "config": self.config, "steps": self.steps,
                           "signalchain": signalchain.__version__, "torch": torch.__version__.split("+")[0]},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "signalchain"


def cache_path(spec: PretrainSpec) -> Path:
    return cache_dir() / f"zoo-pretrained-{spec.bed}-{spec.key}.safetensors"


def _digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _unique(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors as independent contiguous copies (safetensors refuses shared storage: tied weights)."""
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def _load(path: Path, key: str) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
    """The cached state, or None when it is missing, damaged or made for another key."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            state = {k: f.get_tensor(k) for k in f.keys()}
    except Exception:  # missing, truncated, not a safetensors file
        return None
    if meta.get("key") != key or meta.get("sha256") != _digest(state):
        return None
    return state, meta


def _save(path: Path, state: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(state, tmp, metadata=meta)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pretrain(spec: PretrainSpec, say: Callable[[str], None] | None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Train the bed from `build_model(0)` for `spec.steps` updates, deterministically."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pipe = spec.make()
        torch.manual_seed(0)
        model = pipe.build_model(0)
        opt = pipe.build_optimizer(model)
        batches = pipe.loader("train", seed=0)
        t0, first, losses = time.perf_counter(), None, []
        for i in range(spec.steps):
            torch.manual_seed(1000 + i)
            out = pipe.train_step(model, opt, next(batches))
            loss = float(out.loss.detach())
            first = loss if first is None else first
            losses.append(loss)
            if say and (i + 1) % max(1, spec.steps // 10) == 0:
                say(f"pre-training {spec.bed}: {i + 1}/{spec.steps} updates, loss {loss:.3f}")
        last = sum(losses[-10:]) / min(10, len(losses))
        state = _unique(model.state_dict())
        meta = {"key": spec.key, "bed": spec.bed, "steps": str(spec.steps), "loss_first": f"{first:.4f}",
                "loss_last10": f"{last:.4f}", "seconds": f"{time.perf_counter() - t0:.1f}",
                "signalchain": signalchain.__version__}
        meta["sha256"] = _digest(state)
        return state, meta
    finally:
        torch.set_num_threads(threads)


def pretrained_state(spec: PretrainSpec, say: Callable[[str], None] | None = None,
                     rebuild: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The pre-trained weights of `spec` (and their metadata: first and last losses), from the cache
    when a sound copy is there, else trained now and cached."""
    path = cache_path(spec)
    if not rebuild:
        hit = _load(path, spec.key)
        if hit is not None:
            return hit
    with _locked(path):
        hit = None if rebuild else _load(path, spec.key)  # another process may have built it meanwhile
        if hit is not None:
            return hit
        if say:
            say(f"pre-training {spec.bed} ({spec.steps} updates; cached in {path})")
        state, meta = _pretrain(spec, say)
        _save(path, state, meta)
        return state, meta
