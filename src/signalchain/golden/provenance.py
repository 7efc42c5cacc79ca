"""Where a golden batch came from: code version, packages, seed, device, pipeline and its config."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

from ..findings import jsonable

__all__ = ["collect_provenance", "config_hash", "git_state", "package_versions"]


def git_state(cwd: str | None = None) -> dict[str, Any] | None:
    """Commit and dirty flag of the git work tree at `cwd`, or None outside one."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                capture_output=True, text=True, timeout=5)
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("signalchain", "torch", "numpy", "transformers", "audiocraft"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def config_hash(config: Any) -> str | None:
    if config is None:
        return None
    text = json.dumps(jsonable(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def collect_provenance(pipeline: Any = None, *, spec: str | None = None, seed: int | None = None,
                       device: str = "cpu", dtype: str = "float32",
                       faults: list[str] | None = None) -> dict[str, Any]:
    config = getattr(pipeline, "config", None) if pipeline is not None else None
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "packages": package_versions(),
        "platform": f"{platform.system()} {platform.machine()}",
        "argv": list(sys.argv),
        "seed": seed,
        "device": device,
        "dtype": dtype,
        "pipeline": getattr(pipeline, "name", None),
        "pipeline_spec": spec,
        "faults": list(faults or []),
        "config": jsonable(config),
        "config_hash": config_hash(config),
    }
