"""Which code `compare` may re-run for a golden: the golden is data, never code.

A pipeline named on the command line is the user's choice and runs as given. The spec recorded in
a golden's manifest runs only when it is a built-in short name or an importable module spec
(`package.module:attr`), never a file path, never a module that lies inside or beside the golden's
folder (code planted with the golden), never a standard-library module (`os:abort`, `sys:exit`),
and only when the attribute is a pipeline class or instance, or a factory defined in that module.
Anything else is a `UsageError` that says to pass `--pipeline`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import PipelineError, UsageError
from ..pipeline import REQUIRED, validate_pipeline

__all__ = ["manifest_pipeline_spec", "load_manifest_pipeline"]

_HINT = "pass --pipeline SPEC to say which code to re-run"


def _refuse(spec: str, why: str) -> UsageError:
    return UsageError(
        f"the golden's manifest names pipeline {spec!r}, which {why}; a golden is data, never code: {_HINT}"
    )


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() and not part.startswith("_") for part in text.split("."))


def _module_location(top: str) -> Path | None:
    """Where the top-level module would be imported from, found without running any of it."""
    loaded = sys.modules.get(top)
    spec = getattr(loaded, "__spec__", None) if loaded is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else None


def _near(location: Path, folder: Path) -> bool:
    loc, gold = location.resolve(), folder.resolve()
    return loc == gold or gold in loc.parents or loc.parent == gold.parent


def manifest_pipeline_spec(spec: Any, folder: Path, default: str, builtins: Mapping[str, str]) -> str:
    """The module spec to import for a manifest's `pipeline_spec` (`default` when it names none; a
    short name of `builtins` as what it stands for), or a `UsageError` saying why not."""
    if spec is None or spec == "":
        return default
    if not isinstance(spec, str):
        raise _refuse(repr(spec), "is not text")
    if spec in builtins:
        return builtins[spec]
    if spec in builtins.values():
        return spec
    if spec.startswith("--hf-musicgen"):
        raise _refuse(spec, "was built from a saved HF MusicGen (--hf-musicgen), which is not a module to import")
    target, sep, attr = spec.partition(":")
    pathlike = any(c in target for c in "/\\~") or target.endswith(".py") or target.startswith(".")
    if pathlike or Path(target).suffix == ".py":
        raise _refuse(spec, "is a file path")
    if not sep or not _dotted(target) or not _dotted(attr):
        raise _refuse(spec, "is not an importable module spec (package.module:attr)")
    top = target.split(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", "__main__"):
        raise _refuse(spec, "is in Python's standard library, not a pipeline")
    location = _module_location(top)
    if location is None:
        raise _refuse(spec, "is not importable here")
    if _near(location, folder):
        raise _refuse(spec, f"resolves to {location}, inside or beside the golden's folder")
    return spec


def _resolve_attr(module: Any, target: str, attr: str, spec: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PipelineError(f"{target!r} has no attribute {attr!r} (pipeline {spec!r})")
        obj = getattr(obj, part)
    return obj


def load_manifest_pipeline(spec: str) -> Any:
    """Import a spec `manifest_pipeline_spec` accepted and make the pipeline from it."""
    target, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        raise PipelineError(f"cannot import module {target!r} for pipeline {spec!r}: {exc}") from None
    obj = _resolve_attr(module, target, attr, spec)
    if all(hasattr(obj, m) for m in REQUIRED) and not isinstance(obj, type):
        return validate_pipeline(obj, spec)
    if isinstance(obj, type):
        if not all(callable(getattr(obj, m, None)) for m in REQUIRED[1:]):
            raise _refuse(spec, "is a class that is not a Pipeline (it lacks " + ", ".join(REQUIRED[1:]) + ")")
    elif not (inspect.isfunction(obj) and obj.__module__ == module.__name__):
        raise _refuse(spec, "is neither a pipeline class, a pipeline instance, nor a factory defined in its module")
    try:
        made = obj()
    except Exception as exc:
        raise PipelineError(f"calling {spec!r} to make the pipeline failed: {type(exc).__name__}: {exc}") from None
    return validate_pipeline(made, spec)
