"""Conditioning experiments: trace the caption from the metadata to the generated output.

Four measurements, each cheap on its own:
- `measure_condition_data`: the golden batch and a few loader batches, each run only up to its
  condition embedding (the step is stopped from inside our tap before the model's outputs), giving
  captions, metadata, dropout flags, condition tokens, pooled embeddings, and simple descriptors of
  the audio and target tokens each caption is paired with;
- `measure_sensitivity` (`conditioning_sensitivity`): the logits of a fresh model when the captions are
  swapped or emptied;
- `measure_condition_grads`: one backward, and where the gradient stops on the conditioning path;
- `measure_guidance`: a few generated frames with the true, another and the empty caption.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..audio.features import log_mel
from ..pipeline import Pipeline, as_step_output, capabilities
from ..probes.collect import collect
from ..records.conditioning import (
    ConditionBatch,
    ConditionData,
    ConditionGrads,
    CondParam,
    DeclaredGuidance,
    GuidanceProbe,
)
from ..trace import record
from ._outputs import read_generated
from ._seed import seed_everything
from .context import Context

__all__ = ["measure_condition_data", "measure_condition_grads", "measure_guidance", "measure_declared_guidance",
           "audio_descriptors", "token_descriptors", "rolled"]

WANTED = ("caption", "metadata", "audio.cropped", "tokens", "mask.padding", "condition.dropped",
          "condition.tokens", "condition.mask", "condition.embedding", "logits")
STOP_AT = ("condition.embedding", "logits", "loss")  # the model's outputs: nothing needed comes after
MIN_AUDIO_SECONDS = 0.25  # shorter (mostly padded) examples give no usable descriptor


def _grab(pipeline: Pipeline, model: Any, batch: Any, seed: int, stop: bool) -> tuple[dict[str, tuple[Any, dict]], Any]:
    """Run one step under no_grad, keeping copies of the WANTED stages; stop early when asked."""
    seed_everything(seed)
    got = collect(pipeline, model, batch, WANTED, STOP_AT if stop else None, first_only=True, copy=True,
                  no_grad=True)
    # an array keeps the dtype numpy lacks (bfloat16 becomes float32 in the copy)
    kept = {t.stage: (t.value, t.meta if t.dtype is None else {**t.meta, "_dtype": t.dtype}) for t in got.taps}
    return kept, None if got.stopped else as_step_output(got.out)


def audio_descriptors(audio: np.ndarray, lengths: Sequence[int] | None, sample_rate: int) -> np.ndarray:
    """[B, C, T] -> [B, 50]: per mel band mean and spread, level (dBFS) and spectral flux of the valid
    part of each example. Rows shorter than MIN_AUDIO_SECONDS are NaN."""
    audio = np.asarray(audio, dtype=np.float64)
    lengths = list(lengths) if lengths is not None else [audio.shape[-1]] * audio.shape[0]
    rows = []
    for x, n in zip(audio, lengths):
        mono = x.mean(axis=0)[: int(n)]
        if mono.size < MIN_AUDIO_SECONDS * sample_rate:
            rows.append(np.full(50, np.nan))
            continue
        mel = log_mel(mono, sample_rate, n_mels=24)  # [24, frames]
        level = 10.0 * np.log10(float(np.mean(mono**2)) + 1e-12)
        flux = float(np.maximum(np.diff(mel, axis=1), 0).mean()) if mel.shape[1] > 1 else 0.0
        rows.append(np.concatenate([mel.mean(axis=1), mel.std(axis=1), [level, flux]]))
    return np.array(rows)


def token_descriptors(tokens: np.ndarray, padding: np.ndarray | None) -> np.ndarray:
    """[B, K, T] codes -> [B, 3K]: per codebook the entropy of the codes, how often a code repeats
    the previous frame's, and the share of distinct codes, over valid frames. Empty rows are NaN."""
    tokens = np.asarray(tokens)
    if tokens.ndim == 2:
        tokens = tokens[:, None, :]
    B, K, T = tokens.shape
    valid = np.ones((B, T), dtype=bool) if padding is None else np.asarray(padding, dtype=bool).reshape(B, -1)[:, :T]
    out = np.full((B, 3 * K), np.nan)
    for b in range(B):
        if valid[b].sum() < 2:
            continue
        for k in range(K):
            codes = tokens[b, k][valid[b]]
            _, counts = np.unique(codes, return_counts=True)
            p = counts / counts.sum()
            out[b, 3 * k : 3 * k + 3] = [-(p * np.log(p)).sum(), float(np.mean(codes[1:] == codes[:-1])),
                                         len(counts) / len(codes)]
    return out


def _batch_record(source: str, got: dict[str, tuple[Any, dict]]) -> ConditionBatch | None:
    if "caption" not in got:
        return None
    captions = [str(c) for c in ([got["caption"][0]] if isinstance(got["caption"][0], str) else got["caption"][0])]
    rec = ConditionBatch(source=source, captions=captions)
    if "metadata" in got and isinstance(got["metadata"][0], (list, tuple)):
        rec.metadata = [dict(m) if isinstance(m, dict) else {} for m in got["metadata"][0]]
    if "condition.dropped" in got:
        rec.dropped = np.asarray(got["condition.dropped"][0], dtype=bool).reshape(-1)
        rate = got["condition.dropped"][1].get("rate")
        rec.rate = float(rate) if rate is not None else None
    if "condition.tokens" in got:
        rec.ids = np.asarray(got["condition.tokens"][0])
        rec.max_len = got["condition.tokens"][1].get("max_len")
    if "condition.mask" in got:
        rec.mask = np.asarray(got["condition.mask"][0], dtype=bool)
    if "condition.embedding" in got:
        emb = np.asarray(got["condition.embedding"][0], dtype=np.float64)
        rec.embedding = emb[:, None, :] if emb.ndim == 2 else emb
    if "audio.cropped" in got and got["audio.cropped"][1].get("sample_rate"):
        audio, meta = got["audio.cropped"]
        rec.audio_features = audio_descriptors(audio, meta.get("lengths"), int(meta["sample_rate"]))
    if "tokens" in got:
        padding = got["mask.padding"][0] if "mask.padding" in got else None
        rec.token_features = token_descriptors(got["tokens"][0], padding)
    return rec


def _caption_of(example: Any) -> str | None:
    for key in ("caption", "description", "text", "prompt"):
        value = example.get(key) if isinstance(example, dict) else getattr(example, key, None)
        if isinstance(value, str):
            return value
    return None


def measure_condition_data(ctx: Context) -> ConditionData:
    """The golden batch (from the recorded golden step) and `budget.cond_batches` training batches."""
    p = ctx.pipeline
    trace = ctx.golden().trace
    golden = {n: (trace.value(n), trace[n].meta) for n in WANTED if n in trace and trace[n].has_value}
    batches = [b for b in [_batch_record("golden", golden)] if b is not None]
    prompts = list(batches[0].captions) if batches else []  # the golden captions are what one evaluates with
    training: list[str] = []
    source = ""
    if "loader" in capabilities(p):
        model = ctx.fresh_model()
        it = iter(p.loader("train"))
        for _ in range(ctx.budget.cond_batches):
            batch = next(it, None)
            if batch is None:  # a short, finite loader
                break
            got, _ = _grab(p, model, batch, ctx.seed, stop=True)
            rec = _batch_record("loader", got)
            if rec is not None:
                batches.append(rec)
                training += rec.captions
        source = "loader"
    if ctx.budget.cond_examples and "training_examples" in capabilities(p):
        every = [c for c in (_caption_of(e) for e in p.training_examples()) if c is not None]
        if every:
            training, source = every, "training_examples()"
    return ConditionData(batches=batches, training_captions=training, training_source=source, prompts=prompts)


def rolled(captions: Sequence[str]) -> list[str]:
    """Each row gets the next row's caption."""
    return list(captions[1:]) + list(captions[:1])


def _grad_state(g: torch.Tensor | None) -> str:
    if g is None:
        return "none"
    return "ok" if not bool(torch.isfinite(g).all()) or float(g.abs().max()) > 0 else "zero"


def measure_condition_grads(ctx: Context) -> ConditionGrads:
    """One training-mode step of a fresh model; gradients of the loss for the embedding and every
    parameter that `condition_parameters(model)` names."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    model.train()
    params = list(p.condition_parameters(model))
    names = {id(q): n for n, q in model.named_parameters()}
    held: dict[str, Any] = {}

    def hold(stage: str, value: Any, /, **meta: Any) -> Any:
        if stage == "condition.embedding" and "embedding" not in held:
            held["embedding"] = value  # the live tensor: its graph is what we ask about
        return value

    seed_everything(ctx.seed)
    loss = as_step_output(p.step(model, ctx.batch(), hold)).loss
    graph = isinstance(loss, torch.Tensor) and loss.requires_grad
    emb = held.get("embedding")
    emb_rg = bool(emb.requires_grad) if isinstance(emb, torch.Tensor) else None
    trainable = [q for q in params if q.requires_grad]
    targets = ([emb] if emb_rg else []) + trainable
    grads: Sequence[torch.Tensor | None] = [None] * len(targets)
    if graph and targets:
        grads = torch.autograd.grad(loss, targets, allow_unused=True)
    emb_grad = _grad_state(grads[0]) if emb_rg and graph else "n/a"
    by_param = dict(zip((id(q) for q in trainable), grads[1:] if emb_rg else grads))
    out = []
    for q in params:
        flat = q.detach().reshape(-1)
        constant = q.dim() == 1 and flat.numel() > 1 and bool((flat == flat[0]).all())
        out.append(CondParam(name=names.get(id(q), f"<unnamed {tuple(q.shape)}>"), numel=q.numel(),
                             requires_grad=q.requires_grad, ndim=q.dim(), constant=constant,
                             grad=_grad_state(by_param.get(id(q))) if q.requires_grad else "frozen"))
    return ConditionGrads(params=out, loss_has_graph=graph, embedding_requires_grad=emb_rg, embedding_grad=emb_grad)


def _tokens_of(result: Any) -> np.ndarray:
    """What generate returned, comparable across captions: its codes, or its audio when it returns
    only audio (HF's model.generate); raises when it returned neither."""
    got = read_generated(result)
    value = got.codes if got.codes is not None else got.audio
    if value is None:
        raise TypeError(f"generate returned neither token codes nor audio ({type(result).__name__})")
    return np.array(value, copy=True)


def measure_guidance(ctx: Context) -> GuidanceProbe:
    """Generate `budget.guidance_frames` frames for the golden batch, same sampling seed, with the
    true captions, each row another row's caption, and all captions empty (the null condition)."""
    p = ctx.pipeline
    batch = ctx.batch()
    model = ctx.fresh_model()
    trace = ctx.golden().trace
    captions = list(trace.value("caption"))
    short: dict[str, Any] | None = {"max_frames": ctx.budget.guidance_frames}

    def generate(caps: list[str] | None, extra: dict[str, Any] | None = None) -> np.ndarray:
        nonlocal short
        b = batch if caps is None else p.with_captions(batch, caps)
        seed_everything(ctx.seed)
        with torch.no_grad():
            if short is not None:
                try:
                    return _tokens_of(p.generate(model, b, {**short, **(extra or {})}))
                except (TypeError, ValueError, KeyError):
                    if extra:
                        raise
                    short = None  # the sampling has no frame limit we know: generate at full length
            return _tokens_of(p.generate(model, b, dict(extra) if extra else None))

    try:
        true = generate(None)
        changed = {
            name: _changed(generate(caps), true)
            for name, caps in (("other caption", rolled(captions)), ("null caption", [""] * len(captions)))
        }
    except Exception as exc:
        return GuidanceProbe(0, {}, error=f"{type(exc).__name__}: {exc}")
    audio = bool(np.issubdtype(true.dtype, np.floating))
    sampled = None if audio else int(true.size)
    if audio and short is not None and "tokens" in trace and len(trace["tokens"].shape or ()) == 3:
        sampled = int(true.shape[0] * trace["tokens"].shape[1] * ctx.budget.guidance_frames)
    probe = GuidanceProbe(tokens=int(true.size), changed=changed, compared="audio" if audio else "codes",
                          sampled=sampled)
    if changed["null caption"] == 0.0:
        try:  # guidance 1 = the conditional logits alone (AudioCraft's cfg_coef convention)
            plain = generate(None, {"cfg_coef": 1.0})
            probe.changed["null caption, guidance 1"] = _changed(
                generate([""] * len(captions), {"cfg_coef": 1.0}), plain
            )
        except Exception as exc:
            probe.override_error = f"{type(exc).__name__}: {exc}"
    return probe


def _changed(a: np.ndarray, b: np.ndarray) -> float:
    """Share of generated values that differ (1 when the outputs differ in shape: a different length)."""
    return float(np.mean(a != b)) if a.shape == b.shape and a.size else 1.0


def measure_declared_guidance(ctx: Context) -> DeclaredGuidance:
    """One short generation with the pipeline's default sampling, for the guidance it reports applying."""
    from .generation.runs import call_generate  # the generation experiments' own call (tap when taken)

    p = ctx.pipeline
    seed_everything(ctx.seed)
    with record(values=(), stages={"generation.tokens"}) as trace, torch.no_grad():
        try:
            call_generate(p, ctx.golden().model, ctx.batch(), {"max_frames": ctx.budget.guidance_frames})
        except Exception as exc:  # a generate that refuses the frame limit: the default length
            try:
                call_generate(p, ctx.golden().model, ctx.batch(), None)
            except Exception:
                return DeclaredGuidance(None, error=f"{type(exc).__name__}: {exc}")
    got = trace.get("generation.tokens")
    cfg = dict(got.meta.get("sampling") or {}).get("cfg_coef") if got is not None else None
    ok = isinstance(cfg, (int, float)) and not isinstance(cfg, bool)
    return DeclaredGuidance(float(cfg) if ok else None)
