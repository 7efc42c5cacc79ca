"""Helpers of the HF bed's fault tests: build, step, trace, snapshot. Symptoms are measured on
tensors, gradients and losses directly, never through a signalchain detector."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from signalchain import record, tap
from signalchain.experiments.doctor import SYMPTOMS
from signalchain.reference.faults._registry import FAMILIES
from signalchain.reference.hf.faults import catalogue, get_fault
from signalchain.trace.vocabulary import stage_info


def check_registered(family: str | tuple[str, ...], names: set[str], section: str) -> None:
    """Every fault of `family` is one of `names` (each has its test) and is declared completely."""
    families = (family,) if isinstance(family, str) else family
    registered = {f.name for fam in families for f in catalogue(fam)}
    assert registered == names, f"untested: {registered - names}; missing: {names - registered}"
    for name in names:
        f = get_fault(name)
        assert f.family in FAMILIES and f.section == section and f.cause
        assert f.expected_ids and all(i.count(".") >= 1 and i == i.lower() for i in f.expected_ids)
        assert stage_info(f.expected_stage) is not None, f.expected_stage
        assert f.symptom is None or f.symptom in SYMPTOMS
        assert "# Bug" in inspect.getsource(f.apply), f"{name}: say how the bug is written (# Bug: ...)"


def setup(p: Any, seed: int = 0) -> tuple[Any, Any]:
    model = p.build_model(seed)
    return model, p.build_optimizer(model)


def losses(p: Any, model: Any, opt: Any, batch: Any, n: int) -> list[float]:
    return [float(p.train_step(model, opt, batch).loss.detach()) for _ in range(n)]


def trace(p: Any, model: Any, batch: Any, values: Any = True) -> Any:
    with record(values=values) as t, torch.no_grad():
        p.step(model, batch, tap)
    return t


def snapshot(model: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    return {n: q.detach().clone() for n, q in model.named_parameters() if n.startswith(prefix)}


def changed(model: Any, before: dict[str, torch.Tensor]) -> set[str]:
    now = dict(model.named_parameters())
    return {n for n, q in before.items() if not torch.equal(q, now[n].detach())}


def decoder_inputs(p: Any, model: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(the ids the decoder was fed [B*K, T'], the labels [B, T', K]) of one step."""
    seen: dict[str, torch.Tensor] = {}

    def grab(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen["ids"] = kwargs.get("input_ids", args[0] if args else None).detach().clone()

    handle = model.decoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            out = p.step(model, batch)
    finally:
        handle.remove()
    return seen["ids"].reshape(-1, seen["ids"].shape[-1]), out.targets


def as_inputs(labels: torch.Tensor, pad: int) -> torch.Tensor:
    """Labels [B, T', K] laid out as decoder ids [B*K, T'], -100 as the pad id."""
    b, tp, k = labels.shape
    return labels.masked_fill(labels == -100, pad).transpose(1, 2).reshape(b * k, tp)
