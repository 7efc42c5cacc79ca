"""One checkpoint probe: load it into the pipeline's model and optimizer, run the golden batch under a
recording as one update from the stored optimizer state, and measure each param group.

A pipeline may load its own checkpoints: `load_checkpoint(path) -> (model, optimizer)` or
`{"model": model, "optimizer": optimizer, "step": int}`. The model holds the checkpoint's weights
(on the device it trains on), the optimizer (None when the checkpoint has no optimizer state) is
bound to that model's parameters with the stored state loaded; anything it raises skips the
checkpoint. It takes precedence over reading the file here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..._tensor import as_float
from ...golden import Tolerance, compare_traces
from ...probes.group_grads import GroupGrads
from ...records.checkpoints import CheckpointHealth, GroupStats
from ...trace import Trace, record, tap
from .._seed import seed_everything
from ..optimisation._train import norm_of, update_step
from ._checkpoint_files import CheckpointFile, CheckpointLoadError, load_checkpoint_file

__all__ = ["Loaded", "load_into", "group_params", "probe_checkpoint"]

_PREFIXES = ("", "model.", "module.", "_orig_mod.")


@dataclass
class Loaded:
    model: Any
    optimizer: Any
    has_optimizer_state: bool
    source: str
    step: int | None
    notes: list[str]


def _with_tied(model: torch.nn.Module, cand: dict[str, Any]) -> dict[str, Any]:
    """`cand` with the tied weights it leaves out (one tensor under several names, e.g. T5's shared and
    encoder embeddings: safetensors and `save_pretrained` keep one name) filled from a name it holds."""
    names: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for k, v in model.state_dict().items():
        if v.numel():
            names.setdefault((v.data_ptr(), tuple(v.shape)), []).append(k)
    out = dict(cand)
    for group in names.values():
        held = [k for k in group if k in cand]
        for k in group:
            if held and k not in out:
                out[k] = cand[held[0]]
    return out


def _fit(model: torch.nn.Module, state: dict[str, Any], name: str) -> None:
    """Load `state` into `model`, stripping one wrapper prefix (Lightning's `model.`, DDP's `module.`)."""
    want = set(model.state_dict())
    for prefix in _PREFIXES:
        cand = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if set(cand) != want and set(cand) <= want:
            cand = _with_tied(model, cand)
        if set(cand) == want:
            try:
                model.load_state_dict(cand, strict=True)
            except RuntimeError as exc:
                raise CheckpointLoadError(f"{name}: weights do not fit the pipeline's model "
                                          f"({str(exc).splitlines()[-1].strip()[:200]})") from None
            return
    missing, unexpected = sorted(want - set(state)), sorted(set(state) - want)
    raise CheckpointLoadError(f"{name}: weights do not fit the pipeline's model: {len(missing)} missing "
                              f"(e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]})")


def load_into(pipeline: Any, ckpt: CheckpointFile, seed: int) -> Loaded:
    """The pipeline's model and optimizer holding `ckpt`; `CheckpointLoadError` when it does not load."""
    loader = getattr(pipeline, "load_checkpoint", None)
    if callable(loader):
        try:
            out = loader(str(ckpt.path))
            model, opt, step = ((out.get("model"), out.get("optimizer"), out.get("step")) if isinstance(out, Mapping)
                                else (out[0], out[1], None))
        except Exception as exc:
            raise CheckpointLoadError(f"{ckpt.name}: the pipeline's load_checkpoint raised "
                                      f"{type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(model, torch.nn.Module):
            raise CheckpointLoadError(f"{ckpt.name}: load_checkpoint returned {type(model).__name__} as the model")
        notes = [] if opt is not None else ["load_checkpoint gave no optimizer: the optimizer state is absent"]
        return Loaded(model, opt if opt is not None else pipeline.build_optimizer(model), opt is not None,
                      "load_checkpoint", step if isinstance(step, int) else ckpt.step, notes)
    files = load_checkpoint_file(ckpt)
    seed_everything(seed)
    model = pipeline.build_model(seed)
    _fit(model, files.model_state, ckpt.name)
    optimizer = pipeline.build_optimizer(model)
    notes, has_state = list(files.notes), False
    if files.optimizer_state is not None:
        try:
            optimizer.load_state_dict(files.optimizer_state)
            has_state = True
        except Exception as exc:  # a state of another optimizer or group layout: run without it, and say so
            notes.append(f"optimizer state not loaded ({type(exc).__name__}: {str(exc)[:160]}); a fresh one is used")
    if files.scheduler_state is not None and "_last_lr" in files.scheduler_state:
        notes.append(f"scheduler last_lr {files.scheduler_state['_last_lr']}")
    return Loaded(model, optimizer, has_state, ckpt.kind, files.step if files.step is not None else ckpt.step, notes)


def _group_name(i: int, group: Mapping[str, Any], names: dict[int, str]) -> str:
    if isinstance(group.get("name"), str) and group["name"]:
        return group["name"]
    params = [names.get(id(q), "") for q in group["params"]]
    parts = [p.split(".") for p in params if p]
    common: list[str] = []
    for level in zip(*parts) if parts else ():
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or f"group{i}"


def group_params(model: torch.nn.Module, optimizer: Any) -> list[tuple[str, list[torch.Tensor]]]:
    """Each optimizer param group's name (its `name` key, else its parameters' common module) and parameters."""
    names = {id(q): n for n, q in model.named_parameters()}
    out, seen = [], set()
    for i, group in enumerate(optimizer.param_groups):
        name = _group_name(i, group, names)
        name = name if name not in seen else f"{name}#{i}"
        seen.add(name)
        out.append((name, list(group["params"])))
    return out


def _bias(beta: float, step: float | None) -> float:
    return 1.0 - beta**step if step and 0.0 <= beta < 1.0 else 1.0


def _moments(optimizer: Any, group: Mapping[str, Any]) -> tuple[float | None, dict[str, float]]:
    """Adam's step and moment statistics for one group, bias-corrected as Adam's own update uses them."""
    states = [optimizer.state.get(q, {}) for q in group["params"]]
    steps = [as_float(s["step"], None) for s in states if "step" in s]
    step = max((s for s in steps if s is not None), default=None)
    betas = group.get("betas") or (0.0, 0.0)
    out: dict[str, float] = {}
    for key, beta, kind in (("exp_avg", betas[0], "rms"), ("exp_avg_sq", betas[1], "mean")):
        ts = [s[key] for s in states if isinstance(s.get(key), torch.Tensor)]
        if not ts:
            continue
        scale, n, finite, top, total, squares = 1.0 / _bias(float(beta), step), 0, 0, 0.0, 0.0, 0.0
        for t in ts:  # one tensor at a time in float64: memory stays at one parameter's size
            x = t.detach().double() * scale
            n, finite = n + x.numel(), finite + int(torch.isfinite(x).sum())
            m = float(x.abs().max()) if x.numel() else 0.0
            if math.isfinite(top) and (m > top or not math.isfinite(m)):  # a NaN or inf stays the max
                top = m
            total, squares = total + float(x.sum()), squares + float(x.pow(2).sum())
        if not n:
            continue
        out[f"{key}.finite"] = finite / n
        out[f"{key}.max"] = top
        out[f"{key}.{kind}"] = math.sqrt(squares / n) if kind == "rms" else total / n
    return step, out


def _finite_fraction(params: list[torch.Tensor]) -> float:
    n = sum(q.numel() for q in params)
    return sum(int(torch.isfinite(q.detach()).sum()) for q in params) / n if n else 1.0


def probe_checkpoint(pipeline: Any, ckpt: CheckpointFile, index: int, seed: int, golden: Trace,
                     tolerance: Tolerance, per_stage: Mapping[str, Tolerance]) -> tuple[CheckpointHealth, Trace | None]:
    """Measure one checkpoint; a checkpoint that does not load comes back `loaded=False` with the reason."""
    t0 = time.perf_counter()
    health = CheckpointHealth(name=ckpt.name, index=index, step=ckpt.step, path=str(ckpt.path))
    try:
        loaded = load_into(pipeline, ckpt, seed)
    except CheckpointLoadError as exc:
        health.loaded, health.skip_reason, health.seconds = False, str(exc), time.perf_counter() - t0
        return health, None
    except Exception as exc:  # the pipeline's build_model/build_optimizer failed: unhealthy, said, never a crash
        health.error = f"{type(exc).__name__} while building the model for it: {str(exc)[:300]}"
        health.seconds = time.perf_counter() - t0
        return health, None
    model, optimizer = loaded.model, loaded.optimizer
    health.source, health.step, health.notes = loaded.source, loaded.step, loaded.notes
    health.has_optimizer_state = loaded.has_optimizer_state
    groups = group_params(model, optimizer)
    for (name, params), group in zip(groups, optimizer.param_groups):
        step, moments = _moments(optimizer, group)
        health.groups.append(GroupStats(name, sum(q.numel() for q in params), as_float(group.get("lr"), None),
                                        norm_of(params), _finite_fraction(params), step, moments))
    before = [[q.detach().clone() for q in params] for _, params in groups]
    try:
        seed_everything(seed)  # as run_golden: the same batch, dropout and crops as the golden's
        batch = pipeline.golden_batch(seed)
    except Exception as exc:
        health.error = f"{type(exc).__name__} in golden_batch: {str(exc)[:300]}"
        health.seconds = time.perf_counter() - t0
        return health, None
    seed_everything(seed)
    with GroupGrads(optimizer).attached_to() as grads, record(values=True) as trace:
        try:
            out = update_step(pipeline, model, optimizer, batch, tap)
            if "loss" not in trace:
                tap("loss", out.loss)
            health.loss = as_float(out.loss, None)
        except Exception as exc:  # a checkpoint the step cannot run from is unhealthy, not a crash
            health.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    # Per group: the gradients `step()` received (after the pipeline's unscaling and clipping). The
    # total: the step's own `grad.norm` tap where it has one (taken before clipping, so a clipped
    # explosion still shows; and there even when a scaler skipped the step), else the groups' together.
    if grads.norms is not None:
        health.grad_norm = math.sqrt(sum(n * n for n in grads.norms))
        for g, n in zip(health.groups, grads.norms):
            g.grad_norm = n
    if "grad.norm" in trace and trace["grad.norm"].kind == "scalar":
        health.grad_norm = as_float(trace["grad.norm"].summary.get("value"), health.grad_norm)
    if health.error is None:
        for g, (_, params), old in zip(health.groups, groups, before):
            base = norm_of(old)
            g.update_ratio = norm_of([q.detach() - o for q, o in zip(params, old)]) / base if base > 0 else None
    # Stages only a probe has (the update's `grad.norm`, `amp.scale`) are not a divergence from the golden.
    diffs = compare_traces(golden, trace, tolerance, per_stage).stages
    first = next((d for d in diffs if not d.equal and d.stage in golden), None)
    health.vs_golden = first.stage if first is not None else None
    health.seconds = time.perf_counter() - t0
    return health, trace
