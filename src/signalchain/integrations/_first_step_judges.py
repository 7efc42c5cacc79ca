"""The first step of a live run judged the way `doctor` judges a golden trace (issue 25, item 2).

Once, at the end of the first optimizer step:

- **parameters** (any model): every parameter frozen, trainable ones in no optimizer group, and the
  trainable share of each top-level module (`checks.optimisation.modules`: a module frozen whole
  is a design; one frozen all but a sliver, without adapters, is a warning);
- **the step's data** (a Hugging Face MusicGen found in the model, the model itself or inside a
  LightningModule or a peft wrapper): its labels, the decoder input ids the decoder really read
  (the user's, or those the model shifted from the labels), the condition ids and mask, the logits'
  shape and the loss, laid out as the taps of docs/taps.md (with `model_delay=` read off the
  decoder's own `build_delay_pattern_mask`), and judged by `checks.data.DATA_CHECKS`: labels in
  another delay pattern than the model's, decoder inputs equal to the labels, empty masks.

The data comes from hooks on the HF model and its decoder that fire on the first training forward
and are removed after it: nothing runs on later steps. Also kept: the codec's reconstruction of the
labels (`audio.decoded`, through the model's own `audio_encoder.decode`) for the saved golden, so
that `signalchain inspect` has something to play.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..checks.base import run_check
from ..checks.data import DATA_CHECKS
from ..checks.optimisation.modules import judge_parameters
from ..findings import Finding
from ..probes.first_forward import FirstForward
from ..probes.forward_tap import field
from ..records.optimisation import GradientMeasurement, ParamGrad
from ..trace import Trace, make_record
from ..trace.record import StageRecord

__all__ = ["FirstStepJudges", "FirstStepJudging", "find_musicgen"]

MAX_DECODED = 4  # examples decoded to audio for the golden: enough to hear, cheap at capture


def find_musicgen(model: torch.nn.Module) -> torch.nn.Module | None:
    """The first module (the model itself first) whose `decoder` lays codes out with its own delay
    pattern (`build_delay_pattern_mask`) and which has a codec: an HF MusicGen, wrapped or not."""
    for m in model.modules():
        dec = getattr(m, "decoder", None)
        if isinstance(dec, torch.nn.Module) and hasattr(dec, "build_delay_pattern_mask"):
            return m
    return None


def _optimizer_ids(optimizers: list[Any]) -> set[int] | None:
    """The ids of the tensors in every group of these optimizers; None where one has no groups."""
    out: set[int] = set()
    for optimizer in optimizers:
        inner = getattr(optimizer, "optimizer", optimizer)  # HF's AcceleratedOptimizer, Lightning's wrapper
        groups = getattr(inner, "param_groups", None)
        if groups is None:
            return None
        out |= {id(p) for g in groups for p in g["params"]}
    return out


def parameter_records(model: torch.nn.Module, optimizers: list[Any]) -> list[ParamGrad]:
    """What the parameter judges read, from the model and optimizers alone (no gradient read). An
    optimizer that holds none of the model's tensors holds copies (DeepSpeed's flattened partitions):
    membership is then not judged."""
    ids = _optimizer_ids(optimizers)
    if ids is not None and not any(id(p) in ids for p in model.parameters() if p.requires_grad):
        ids = None
    out = []
    for name, p in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        out.append(ParamGrad(name=name, module=module, numel=p.numel(), requires_grad=p.requires_grad,
                             in_optimizer=ids is None or id(p) in ids, used=True, grad="ok",
                             shape=tuple(p.shape)))
    return out


def _cpu(x: Any) -> np.ndarray | None:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else None


class FirstStepJudges:
    """A probe on the first training forward; `judge()` once after the first step."""

    def __init__(self, model: torch.nn.Module, optimizer: Any) -> None:
        self.model = model
        self.optimizers = [optimizer] if optimizer is not None else []
        self.done = False
        self.hf = find_musicgen(model)
        self.probe = FirstForward(self.hf, self.hf.decoder) if self.hf is not None else None

    @property
    def kwargs(self) -> dict[str, Any] | None:
        return self.probe.kwargs if self.probe is not None else None

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()

    def release(self) -> None:
        if self.probe is not None:
            self.probe.release()

    # ---- the judgement --------------------------------------------------------------------------------

    def judge(self, step: int) -> list[Finding]:
        """Once: the parameter judges, then the data judges when an HF MusicGen's step was seen."""
        if self.done:
            return []
        self.done = True
        self.close()
        params = parameter_records(self.model, self.optimizers)
        r = GradientMeasurement(loss_is_tensor=True, loss_requires_grad=True, loss_depends_on_logits=None,
                                params=params, breaks=[], stage_requires_grad={}, stages=[])
        lm = next((n for n, m in self.model.named_modules() if self.hf is not None and m is self.hf.decoder), None)
        out = run_check("first_step.parameters", judge_parameters, r, lm)
        trace = self.trace()
        if trace is not None:
            for check in DATA_CHECKS:
                out += run_check(f"first_step.{check.__name__}", check, trace)
        for f in out:
            f.evidence.setdefault("step", step)
            f.evidence.setdefault("seen", "the first training step (live)")
        return out

    def _lm(self) -> tuple[int, int] | None:
        """(codebooks, pad id) of the HF decoder."""
        assert self.hf is not None
        cfg = getattr(self.hf.decoder, "config", None)
        k, pad = getattr(cfg, "num_codebooks", None), getattr(cfg, "pad_token_id", None)
        return (int(k), int(pad)) if k is not None and pad is not None else None

    def trace(self) -> Trace | None:
        """The step as the taps of docs/taps.md (a), or None where the HF step was not seen whole."""
        kw, lm = self.kwargs, self._lm() if self.hf is not None else None
        labels = kw.get("labels") if kw else None
        ids = kw.get("input_ids") if kw else None
        if lm is None or not isinstance(labels, torch.Tensor) or labels.dim() != 3 or not isinstance(ids, torch.Tensor):
            return None
        from .hf_musicgen.labels import model_delays

        k, pad = lm
        delays = model_delays(self.hf.decoder, k, pad)
        y = _cpu(labels)  # [B, T', K], -100 ignored
        t = Trace()

        def add(name: str, value: Any, **meta: Any) -> None:
            t.append(make_record(name, len(t), value, meta, keep_value=True))

        add("condition.tokens", _cpu(ids))
        mask = kw.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            add("condition.mask", _cpu(mask).astype(bool))
        assert self.probe is not None
        if self.probe.inner_ids is not None:
            add("tokens.input", _cpu(self.probe.inner_ids), model_delay=delays)
        add("targets", y, ignore_index=-100, model_delay=delays)
        if self.probe.logits_shape is not None:  # its shape is what the judges read: the values are not kept
            t.append(StageRecord("logits", len(t), "tensor", self.probe.logits_dtype or "float32",
                                 list(self.probe.logits_shape), "cpu", {}, {}))
        # what HF's loss counts: neither the ignore index nor the pad id (it masks both)
        add("mask.loss", ((y != -100) & (y != pad)).transpose(0, 2, 1))
        if self.probe.loss is not None:
            add("loss", float(self.probe.loss))
        return t

    def reconstruction(self) -> list[tuple[str, Any, dict[str, Any]]]:
        """The labels decoded by the model's own codec (`audio.decoded`), to listen to in the golden;
        [] without a codec or labels, or when decoding fails (never raised: it is only for listening)."""
        try:
            return self._reconstruction()
        except Exception:
            return []

    @torch.no_grad()
    def _reconstruction(self) -> list[tuple[str, Any, dict[str, Any]]]:
        codec = getattr(self.hf, "audio_encoder", None) if self.hf is not None else None
        kw, lm = self.kwargs, self._lm() if self.hf is not None else None
        labels = kw.get("labels") if kw else None
        if codec is None or not hasattr(codec, "decode") or lm is None or not isinstance(labels, torch.Tensor):
            return []
        from .hf_musicgen.labels import model_delays

        k, pad = lm
        delays = model_delays(self.hf.decoder, k, pad) or [0] * k
        y = labels[:MAX_DECODED].detach().transpose(1, 2)  # [B, K, T']
        frames = y.shape[-1] - max(delays)
        if frames <= 0:
            return []
        codes = torch.stack([y[:, j, d : d + frames] for j, d in enumerate(delays)], dim=1)  # [B, K, T] frame time
        card = int(getattr(self.hf.decoder.config, "vocab_size", pad))
        codes = torch.where((codes >= 0) & (codes < card), codes, torch.zeros_like(codes))
        device = next(codec.parameters()).device
        out = codec.decode(codes[None].to(device), [None])
        audio = field(out, "audio_values")
        audio = audio if audio is not None else (out[0] if isinstance(out, (tuple, list)) else out)
        cfg = getattr(getattr(self.hf, "config", None), "audio_encoder", None)
        rate = getattr(cfg, "sampling_rate", None)
        if not isinstance(audio, torch.Tensor) or rate is None:
            return []
        return [("audio.decoded", audio.float().cpu(),
                 {"sample_rate": int(rate), "source": "the codec's reconstruction of the labels (the model's own "
                  "audio_encoder.decode, the delay pattern undone; ignored positions as code 0)",
                  "examples": int(codes.shape[0])})]



class FirstStepJudging:
    """The first-step half of `LiveSession` (a mixin: the session calls these at its call sites)."""

    _first: FirstStepJudges | None = None

    def _add(self, finding: Finding) -> None:  # provided by `Reporting`
        raise NotImplementedError

    def _first_attach(self, model: torch.nn.Module, optimizer: Any) -> None:
        self._first_close()
        self._first = FirstStepJudges(model, optimizer)

    def first_step_optimizers(self, optimizers: list[Any]) -> None:
        """Every optimizer of the run (a trainer with several), for the parameters-in-no-optimizer judge."""
        if self._first is not None and optimizers:
            self._first.optimizers = list(optimizers)

    def _first_extra(self) -> list[tuple[str, Any, dict[str, Any]]]:
        """What the golden adds to the first step's batch: the codec's reconstruction of the labels."""
        return self._first.reconstruction() if self._first is not None and not self._first.done else []

    def _first_step_end(self, step: int) -> None:
        """Judge the first step (once), then let go of what it held."""
        first = self._first
        if first is None or first.done:
            return
        try:
            for finding in first.judge(step):
                self._add(finding)
        finally:
            first.release()

    def _first_close(self) -> None:
        if self._first is not None:
            self._first.close()
