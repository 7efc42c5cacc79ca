"""Calling `generate` as an experiment: on a few prompts, with sampling overrides, recording what the
pipeline taps (`generation.tokens`, and `generation.logits[.cond|.uncond]` where it logs them).

The sampling vocabulary is AudioCraft's (`greedy`, `temperature`, `top_k`, `top_p`, `cfg_coef`,
`max_frames`, `prompt`, `seed`, `stop_after_silence_frames`, `silence_codes`): a pipeline whose
generate refuses a key just loses the runs that need it (each run records its error).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import numpy as np
import torch

from ...pipeline import capabilities
from ...records.generation import GenerationRun, StopProbe
from ...trace import Trace, record, tap
from .._outputs import call_decode, generated_field, read_generated
from .._seed import seed_everything
from .metrics import audio_loop, eos_stats, guidance_coefficient, sampler_fit, token_stats

__all__ = ["take", "generate_once", "call_generate", "codes_of", "NEUTRAL", "stop_probe"]

#: Each sampling setting at its neutral value: plain ancestral sampling from the model's distribution.
NEUTRAL: dict[str, Any] = {"greedy": False, "temperature": 1.0, "top_k": 0, "top_p": 0.0, "cfg_coef": 1.0}
STAGES = {"generation.tokens", "generation.logits", "generation.logits.cond", "generation.logits.uncond"}


def take(batch: Any, n: int) -> Any:
    """The first `n` examples of a batch (lists/arrays/tensors of the batch's length are sliced, in a
    dataclass, a dict, or bare); the batch itself when it is no longer or cannot be sliced."""
    if isinstance(batch, dict):  # a dict's len is its number of keys: the batch size is its columns' length
        lengths = [len(v) for v in batch.values() if isinstance(v, (list, tuple))
                   or (isinstance(v, (np.ndarray, torch.Tensor)) and v.ndim > 0)]
        lengths = [m for m in lengths if m]
        if not lengths:
            return batch
        size = max(set(lengths), key=lengths.count)
    else:
        try:
            size = len(batch)
        except TypeError:
            return batch
    if size <= n:
        return batch

    def cut(v: Any) -> Any:
        if isinstance(v, (list, tuple, np.ndarray, torch.Tensor)) and len(v) == size:
            return v[:n]
        return v

    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        out = dataclasses.replace(batch, **{f.name: cut(getattr(batch, f.name)) for f in dataclasses.fields(batch)
                                            if f.init})
    elif isinstance(batch, dict):
        return {k: cut(v) for k, v in batch.items()}
    elif isinstance(batch, (list, tuple, np.ndarray, torch.Tensor)):
        out = batch[:n]
    else:
        return batch
    try:
        return out if len(out) == n else batch
    except TypeError:
        return batch


def _takes_tap(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "tap" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def call_generate(p: Any, model: Any, batch: Any, sampling: dict[str, Any]) -> Any:
    """`generate(model, batch, sampling)`, handing it the recording `tap` (by name) when it takes one;
    a generate without one can still call `signalchain.tap` itself."""
    return p.generate(model, batch, sampling, tap=tap) if _takes_tap(p.generate) else p.generate(model, batch, sampling)


def codes_of(result: Any) -> np.ndarray | None:
    """Token codes [B, K, T] from whatever generate returned (codes, a result with `.codes`, a dict
    or `ModelOutput`); None when it returned audio only (see `_outputs.read_generated`)."""
    return read_generated(result).codes


def _tapped_or_returned(trace: Trace | None, result: Any) -> np.ndarray | None:
    t = trace.get("generation.tokens") if trace is not None else None
    if t is not None and t.value is not None and np.ndim(t.value) == 3:
        return np.asarray(t.value)
    return codes_of(result)


def generate_once(p: Any, model: Any, batch: Any, label: str, overrides: dict[str, Any], seed: int,
                  frames: int, frame_rate: float | None = None,
                  eos_id: int | None = None) -> tuple[GenerationRun, Trace | None, Any]:
    """One generate call, measured: token statistics, the sampler's fit to its logits, guidance; and,
    for symbolic ids whose vocabulary has an EOS id (`eos_id`), what it did with EOS."""
    sampling = {"max_frames": frames, "seed": seed, **overrides}
    run = GenerationRun(label=label, overrides={k: v for k, v in overrides.items() if k != "prompt"}, seed=seed)
    if "prompt" in overrides:
        run.overrides["prompt_frames"] = int(np.shape(overrides["prompt"])[-1])
    seed_everything(seed)
    result = None
    with record(values=STAGES, stages=STAGES) as trace:
        try:
            result = call_generate(p, model, batch, sampling)
        except Exception as exc:  # a setting the pipeline refuses, or a broken sampler: a result
            run.error = f"{type(exc).__name__}: {exc}"
    tokens = trace.get("generation.tokens")
    meta = tokens.meta if tokens is not None else {}
    codes = _tapped_or_returned(trace, result)
    if codes is None or codes.ndim != 3:
        if run.error is not None:
            return run, trace, result
        got = read_generated(result, getattr(p, "sample_rate", None))
        if got.audio is not None:  # audio only (HF's model.generate): what can be measured on audio is
            run.audio_only = got.describe()
            rate = got.sample_rate
            audio = got.audio[:1].reshape(-1, got.audio.shape[-1])
            if rate and np.isfinite(audio).all() and audio.shape[-1] >= int(rate) // 5:
                run.audio_loop = audio_loop(audio.astype(np.float32), int(rate))
        else:
            run.error = ("generate returned no [B, K, T] token codes and no audio, and tapped no generation.tokens "
                         f"(it returned {type(result).__name__})")
        return run, trace, result
    for name in ("frames_generated", "stopped", "prompt_frames"):
        value = meta.get(name, generated_field(result, name))
        setattr(run, name, value if value is None else (bool(value) if name == "stopped" else int(value)))
    run.reported = dict(meta.get("sampling") or {})
    reported_cfg = run.reported.get("cfg_coef")
    if isinstance(reported_cfg, (int, float)) and not isinstance(reported_cfg, bool):
        run.guidance = float(reported_cfg)  # what the pipeline says it applied; a measured coefficient wins below
    card = meta.get("cardinality")
    run.cardinality = int(card) if card is not None else None
    if run.cardinality is not None:
        run.invalid = int(((codes < 0) | (codes >= run.cardinality)).sum())
    valid = codes[:, :, : run.frames_generated] if run.frames_generated else codes
    run.stats = token_stats(valid, frame_rate)
    run.audio_loop = _audio_loop(p, valid[:1], model)
    g = None
    if "generation.logits" in trace and trace["generation.logits"].value is not None:
        g = np.asarray(trace.value("generation.logits"), dtype=np.float64)  # [B, K, T, C]
    if eos_id is not None and codes.shape[1] == 1:
        run.eos = eos_stats(codes, eos_id, g)
    if g is not None:
        if g.shape[:3] == codes.shape:
            n = run.frames_generated or codes.shape[-1]
            sampled = np.isfinite(g[:, :, :n]).all(-1)
            run.sampled_share = float(sampled.mean())
            run.fit = sampler_fit(g[:, :, :n], codes[:, :, :n])
            if "generation.logits.cond" in trace and "generation.logits.uncond" in trace:
                run.guidance = guidance_coefficient(g, np.asarray(trace.value("generation.logits.cond")),
                                                    np.asarray(trace.value("generation.logits.uncond")))
    return run, trace, result


def _audio_loop(p: Any, codes: np.ndarray, model: Any = None) -> dict[str, float] | None:
    """Repetition heard rather than counted: `audio_loop` of the decoded first prompt, when the pipeline
    can decode and the codes are valid (invalid ones are the output family's to report)."""
    rate = getattr(p, "sample_rate", None)
    if "decode" not in capabilities(p) or not rate or codes.shape[-1] < 4:
        return None
    try:
        audio = read_generated(call_decode(p, torch.as_tensor(codes), model)).audio
    except Exception:
        return None
    if audio is None:
        return None
    audio = audio.reshape(-1, audio.shape[-1])
    if not np.isfinite(audio).all() or audio.shape[-1] < int(rate) // 5:
        return None
    return audio_loop(audio, int(rate))


def stop_probe(p: Any, model: Any, batch: Any, frames: int, seed: int) -> StopProbe | None:
    """Greedy run on one prompt, then the same run told to stop after one frame of a pattern it produces.

    The stop must fire at that frame: the condition cannot be blamed on the model, which is known to
    produce the pattern there.
    """
    one = take(batch, 1)
    free, trace, result = generate_once(p, model, one, "stop: free", {"greedy": True}, seed, frames)
    codes = _tapped_or_returned(trace, result) if free.error is None else None
    start = free.prompt_frames or 0  # a stop condition watches sampled frames only, not the prompt's
    if codes is None or codes.shape[0] != 1 or codes.shape[-1] - start < 4:
        return None
    target = start + (codes.shape[-1] - start) // 4
    pattern = codes[0, :, target]  # [K]
    first = start + int(np.flatnonzero((codes[0, :, start:] == pattern[:, None]).all(0))[0])
    overrides = {"greedy": True, "stop_after_silence_frames": 1, "silence_codes": torch.as_tensor(pattern)}
    run, trace, result = generate_once(p, model, one, "stop", overrides, seed, frames)
    if run.error is not None:
        return StopProbe(frames=frames, pattern_frame=first, stop_after=1, frames_generated=None, stopped=None,
                         continued=False, error=run.error)
    out = _tapped_or_returned(trace, result)
    after = out[0, :, first + 1 :] if out is not None else np.zeros((0, 0))
    continued = bool(after.size) and not bool((after == pattern[:, None]).all())
    return StopProbe(frames=frames, pattern_frame=first, stop_after=1, frames_generated=run.frames_generated,
                     stopped=run.stopped, continued=continued)
