"""The `Pipeline` protocol: the one contract between signalchain and a training codebase (docs/taps.md).

A pipeline is named on the command line as `package.module:attr` or `path/to/file.py:attr`; the
attribute is an instance, a class, or a zero-argument factory.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import PipelineError, UsageError
from .findings import Finding, Severity

__all__ = [
    "Pipeline",
    "StepOutput",
    "REQUIRED",
    "OPTIONAL",
    "HIDDEN_FROM_DETECTORS",
    "ProtocolView",
    "capabilities",
    "missing_capability",
    "validate_pipeline",
    "load_pipeline",
    "as_step_output",
]

REQUIRED = ("name", "golden_batch", "build_model", "build_optimizer", "step")

#: Optional capabilities. An experiment that needs one a pipeline lacks says so as an `info` finding.
OPTIONAL = {
    "with_captions": "with_captions(batch, captions) -> batch with the captions replaced",
    "condition_parameters": "condition_parameters(model) -> parameters of the conditioning path",
    "generate": "generate(model, batch, sampling) -> codes [B, K, T], audio [B, C, S], a dict or ModelOutput "
                "holding them (tokens/codes/sequences, audio/audio_values, sample_rate), or a result with .codes",
    "decode": "decode(tokens) or decode(tokens, model) -> audio [B, C, S]",
    "decode_notes": "decode_notes(tokens) -> notes table [N, 7] of token ids [B, T] (symbolic pipelines; "
                    "columns signalchain.symbolic.NOTE_COLUMNS)",
    "sample_rate": "sample_rate: the rate of decoded audio",
    "training_examples": "training_examples() -> examples, for memorisation checks",
    "splits": "splits() -> datasets by split, for leakage checks",
    "loader": "loader(split) -> iterable of batches",
    "amp_dtype": "amp_dtype: the autocast dtype the run trains with",
    "scaler": "scaler: the GradScaler the run trains with",
    "train_step": "train_step(model, optimizer, batch, tap) -> StepOutput: one full update as the run does it",
    "config": "config: a JSON-able dict of the pipeline's settings (hashed into provenance)",
    "render": "render(model, batch, folder, sampling, tap) -> written files: generate, decode, write, read back",
    "load_checkpoint": "load_checkpoint(path) -> (model, optimizer) or {model, optimizer}: a saved state, for bisect",
    "with_faults": "with_faults(names) -> the same pipeline with catalogue faults injected",
    "fault_catalogue": "fault_catalogue() -> [{name, family, cause, expected_ids, expected_stage, symptom}]",
}

#: What a detector must never see (DESIGN §6): how the pipeline was configured or broken.
HIDDEN_FROM_DETECTORS = ("config", "with_faults", "fault_catalogue")


@dataclass
class StepOutput:
    """What `Pipeline.step` returns: at least the loss; logits/targets/mask where the pipeline has them."""

    loss: Any
    logits: Any = None
    targets: Any = None
    mask: Any = None
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Pipeline(Protocol):
    """The required part of the contract. See `OPTIONAL` for the capabilities experiments may use."""

    name: str

    def golden_batch(self, seed: int) -> Any:
        """A small fixed batch, the same every call for a seed."""

    def build_model(self, seed: int) -> Any:
        """A freshly initialised `torch.nn.Module`, the same every call for a seed."""

    def build_optimizer(self, model: Any) -> Any:
        """The optimizer the run would use for `model`."""

    def step(self, model: Any, batch: Any, tap: Callable[..., Any]) -> StepOutput:
        """Data preparation, forward and loss, calling `tap(stage, value, **meta)` at each boundary."""


class ProtocolView:
    """A pipeline reduced to the protocol and its optional capabilities, minus its configuration.

    Experiments and checks are run on this view when faults are scored, so that no detector can
    read fault names or settings: it sees what a user's pipeline would show, nothing more.
    """

    def __init__(self, pipeline: Any):
        object.__setattr__(self, "_pipeline", pipeline)

    def __getattr__(self, name: str) -> Any:
        allowed = name in REQUIRED or (name in OPTIONAL and name not in HIDDEN_FROM_DETECTORS)
        if not allowed:
            raise AttributeError(f"{name!r} is not part of the Pipeline protocol")
        return getattr(object.__getattribute__(self, "_pipeline"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a ProtocolView is read-only")

    def __repr__(self) -> str:
        return f"ProtocolView({getattr(object.__getattribute__(self, '_pipeline'), 'name', '?')})"


def as_step_output(value: Any) -> StepOutput:
    """Accept a `StepOutput`, a mapping with a `loss` key, or a bare loss."""
    if isinstance(value, StepOutput):
        return value
    if isinstance(value, Mapping):
        if "loss" not in value:
            raise PipelineError(f"step() returned a mapping without 'loss' (keys: {sorted(value)})")
        known = {k: value[k] for k in ("loss", "logits", "targets", "mask") if k in value}
        extras = {k: v for k, v in value.items() if k not in known}
        return StepOutput(**known, extras=extras)
    if value is None:
        raise PipelineError("step() returned None; it must return a StepOutput (or at least the loss)")
    return StepOutput(loss=value)


def capabilities(pipeline: Any) -> set[str]:
    """The optional capabilities this pipeline offers."""
    return {name for name in OPTIONAL if getattr(pipeline, name, None) is not None}


def missing_capability(pipeline: Any, capability: str, needed_by: str) -> Finding | None:
    """An `info` finding when `pipeline` lacks `capability`, else None."""
    if capability in capabilities(pipeline):
        return None
    return Finding(
        id="pipeline.capability_missing",
        severity=Severity.INFO,
        stage=None,
        message=f"{needed_by} did not run: pipeline {getattr(pipeline, 'name', '?')!r} has no {capability}",
        evidence={"capability": capability, "needed_by": needed_by},
        hint=f"add `{OPTIONAL.get(capability, capability)}` to the pipeline to enable it",
        check=needed_by,
    )


def validate_pipeline(obj: Any, origin: str = "pipeline") -> Any:
    """Return `obj` if it has every required member, else raise naming what is missing."""
    missing = [m for m in REQUIRED if not hasattr(obj, m)]
    if missing:
        raise PipelineError(
            f"{origin} ({type(obj).__name__}) is not a Pipeline: it lacks {', '.join(missing)}; "
            f"a pipeline needs {', '.join(REQUIRED)} (docs/taps.md shows one)"
        )
    not_callable = [m for m in REQUIRED[1:] if not callable(getattr(obj, m))]
    if not_callable:
        raise PipelineError(f"{origin}: {', '.join(not_callable)} must be callable")
    return obj


def _import_file(path: Path) -> Any:
    if path.is_dir():
        raise PipelineError(f"pipeline file {str(path)!r} is a folder, not a Python file; name the file "
                            "(path/to/file.py:attr) or a module (package.module:attr)")
    if not path.is_file():
        raise PipelineError(f"pipeline file {str(path)!r}: no such file or folder")
    mod_name = f"_signalchain_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise PipelineError(f"cannot import {str(path)!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PipelineError(f"importing {str(path)!r} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.pop(0)
    return module


def load_pipeline(spec: str) -> Any:
    """Load `package.module:attr` or `path/to/file.py:attr` into a pipeline instance."""
    if ":" not in spec:
        raise UsageError(
            f"pipeline {spec!r} has no ':attr'; name it as package.module:attr or path/to/file.py:attr"
        )
    target, attr = spec.rsplit(":", 1)
    if target.endswith(".py") or "/" in target or "\\" in target:
        module = _import_file(Path(target))
    else:
        here = os.getcwd()  # `python -m` and `python file.py` see the working folder: a module beside the user too
        if here not in sys.path and "" not in sys.path:
            sys.path.append(here)
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise PipelineError(f"cannot import module {target!r} for pipeline {spec!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PipelineError(f"{target!r} has no attribute {attr!r} (pipeline {spec!r})")
        obj = getattr(obj, part)
    if isinstance(obj, type) or (callable(obj) and not all(hasattr(obj, m) for m in REQUIRED)):
        try:
            obj = obj()
        except Exception as exc:
            raise PipelineError(f"calling {spec!r} to make the pipeline failed: {type(exc).__name__}: {exc}") from exc
    return validate_pipeline(obj, spec)
