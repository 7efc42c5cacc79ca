"""The training side of repetition: what the loader shows the model, and whether the model can tell
one step of a sequence from another.

Data: a few loader batches, recorded at the crop and the tokens. A model learns loops when the
examples are loops of very few sounds, when they are all alike, or when its training windows are
too short to hold a phrase. Model: the index lookups of every embedding table during one step; a
table indexed along the sequence with the same row at every step gives no sense of position.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ...audio.features import log_mel
from ...checks._util import as_bool_mask
from ...pipeline import capabilities
from ...probes.embedding_inputs import EmbeddingCall, EmbeddingInputs
from ...records.generation import DataVariety, PositionProbe
from ...stats import as_batch_audio
from ...trace import record, tap
from .._seed import seed_everything
from ..context import Context
from .metrics import frame_entropy

__all__ = ["measure_data_variety", "probe_positions"]

_STAGES = {"audio.cropped", "tokens", "mask.padding", "caption", "crop"}  # small stages only: summaries cost


def _profile(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Time-averaged log-mel profile [n_mels] of one example [C, T]: its overall timbre and register."""
    hop = max(1, sample_rate // 50)
    return log_mel(audio, sample_rate, n_fft=min(1024, 4 * hop), hop=hop, n_mels=40).mean(axis=1)


def _alike_ratio(profiles: list[np.ndarray], halves: list[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """Median distance between different examples' profiles over the median distance between the two
    halves of one example: about 1 when examples are as alike as two parts of the same one. Distances of
    log-mel profiles, so a spectral tilt all music shares cancels (a correlation would count it)."""
    if len(profiles) < 3 or len(halves) < 3:
        return None
    P = np.stack(profiles)
    cross = [float(np.linalg.norm(P[i] - P[j])) for i in range(len(P)) for j in range(i + 1, len(P))]
    within = float(np.median([np.linalg.norm(a - b) for a, b in halves]))
    return float(np.median(cross)) / within if within > 0 else None


def _mean_pairwise_corr(profiles: list[np.ndarray]) -> float | None:
    if len(profiles) < 3:
        return None
    c = np.corrcoef(np.stack(profiles))
    return float(c[np.triu_indices(len(profiles), 1)].mean())


def _jaccard(captions: list[str]) -> float | None:
    words = [set(c.lower().replace(",", " ").split()) for c in captions if c]
    pairs = [len(a & b) / len(a | b) for a, b in itertools.combinations(words, 2) if a | b]
    return float(np.mean(pairs)) if pairs else None


def _record_batches(ctx: Context, batches: Iterator[Any], n: int, model: torch.nn.Module,
                    kept: list[Any] | None = None) -> list[Any]:
    traces = []
    for _ in range(n):
        try:
            batch = next(batches)
        except StopIteration:
            break
        seed_everything(ctx.seed)
        with record(values=_STAGES, stages=_STAGES) as t, torch.no_grad():
            ctx.pipeline.step(model, batch, tap)
        traces.append(t)
        if kept is not None:
            kept.append(batch)
    return traces


Seen = tuple[str, np.ndarray]  # (caption, tokens [1, K, T] of its valid frames): what the model was shown


def measure_data_variety(ctx: Context, model: torch.nn.Module, batches: list[Any] | None = None
                         ) -> tuple[DataVariety, list[Seen]]:
    """Per example: the variety of coarse tokens; across examples: spectral and caption similarity.

    Also returns the tokens of each example seen, for the nearest-example search; the loader batches it
    measured are appended to `batches` (a short training can reuse them: their tokens are cached)."""
    p = ctx.pipeline
    has_loader = "loader" in capabilities(p)
    n = max(2, ctx.budget.gen_data_batches)
    traces = _record_batches(ctx, iter(p.loader("train")), n, model, batches) if has_loader else []
    if not traces:  # no loader: the golden batch is all we know of the data
        traces = [ctx.golden().trace]
    crop_s: list[float] = []
    clip_s: list[float] = []
    within: list[float] = []
    profiles: list[np.ndarray] = []
    halves: list[tuple[np.ndarray, np.ndarray]] = []
    captions: list[str] = []
    hashes: set[str] = set()
    seen: list[Seen] = []
    for t in traces:
        tokens = t.get("tokens")
        caption = t.get("caption")
        names = [str(c) for c in caption.value] if caption is not None and caption.value is not None else []
        if tokens is not None and tokens.value is not None and np.ndim(tokens.value) == 3:
            codes = np.asarray(tokens.value)
            pad = t.get("mask.padding")
            # [B, T] or [B, K, T] padding mask (DESIGN §2) -> valid frames [B, T]
            valid = as_bool_mask(np.asarray(pad.value, bool) if pad is not None and pad.value is not None else None,
                                 codes.shape)[:, 0]
            within += [frame_entropy(codes[i : i + 1, :1], valid[i : i + 1]) for i in range(len(codes))]
            for i in range(len(codes)):
                digest = hashlib.sha1(np.ascontiguousarray(codes[i]).tobytes()).hexdigest()
                if valid[i].sum() >= 8 and digest not in hashes:
                    seen.append((names[i] if i < len(names) else f"loader example {len(seen)}",
                                 codes[i][:, valid[i]][None]))
                hashes.add(digest)
        cropped = t.get("audio.cropped")
        if cropped is not None and cropped.value is not None and cropped.sample_rate:
            sr = cropped.sample_rate
            audio = as_batch_audio(np.asarray(cropped.value))
            lengths = cropped.meta.get("lengths") or [audio.shape[-1]] * len(audio)
            bounds = t.get("crop")
            window = np.asarray(bounds.value) if bounds is not None and bounds.value is not None else None
            if window is not None and window.ndim == 2 and window.shape[1] >= 2:  # [B, 2] sample bounds
                crop_s.append(float(np.median(window[:, 1] - window[:, 0])) / (bounds.sample_rate or sr))
            else:
                crop_s.append(audio.shape[-1] / sr)
            for i, x in enumerate(audio):
                n_ = int(lengths[i])
                if n_ >= sr // 4:  # a profile of mostly padding says nothing
                    profiles.append(_profile(x[:, :n_], sr))
                if n_ >= sr // 2:  # halves of a quarter second each, at least
                    halves.append((_profile(x[:, : n_ // 2], sr), _profile(x[:, n_ // 2 : n_], sr)))
        source = t.get("crop")  # the valid length of each clip the crop was chosen from
        if source is not None and source.sample_rate and source.meta.get("lengths") is not None:
            clip_s += [int(n_) / source.sample_rate for n_ in source.meta["lengths"]]
        captions += names
    valid_sim = None
    if has_loader:  # the validation split as the contrast (one batch)
        try:
            vt = _record_batches(ctx, iter(p.loader("valid")), 1, model)
        except Exception:  # no validation split: nothing to compare with
            vt = []
        vprof = []
        for t in vt:
            rec = t.get("audio.cropped")
            if rec is not None and rec.value is not None and rec.sample_rate:
                audio = as_batch_audio(np.asarray(rec.value))
                lengths = rec.meta.get("lengths") or [audio.shape[-1]] * len(audio)
                vprof += [_profile(x[:, : int(lengths[i])], rec.sample_rate)
                          for i, x in enumerate(audio) if int(lengths[i]) >= rec.sample_rate // 4]
        valid_sim = _mean_pairwise_corr(vprof)
    variety = DataVariety(examples=len(within) or len(captions),
                          crop_seconds=float(np.median(crop_s)) if crop_s else None, clip_seconds=clip_s,
                          within_entropy=within, profile_similarity=_mean_pairwise_corr(profiles),
                          caption_overlap=_jaccard(captions), valid_profile_similarity=valid_sim,
                          distinct_examples=len(hashes), alike_ratio=_alike_ratio(profiles, halves))
    return variety, seen


def _lookup(call: EmbeddingCall) -> dict[str, Any] | None:
    """One embedding lookup summarised: its table, length, distinct ids, and whether it is constant
    or ascending along the last axis (None for a scalar index, a lookup that never returned, or one
    that cannot be read: a probe never breaks the step it watches). A lookup whose one row is the
    table's `padding_idx` is padding (an empty or dropped caption), not a position: not constant."""
    try:
        idx, output = call.ids, call.output
        if output is None or idx.dim() == 0:
            return None
        flat = idx.reshape(-1, idx.shape[-1])  # [rows, L]: lookups along the last axis
        vecs = output.reshape(-1, idx.shape[-1], output.shape[-1])  # [rows, L, D]
        first = int(flat.reshape(-1)[0])
        padding = call.module.padding_idx is not None and first == int(call.module.padding_idx)
        return {"module": call.name, "rows": int(call.module.num_embeddings),
                "length": int(idx.shape[-1]), "distinct": int(flat[0].unique().numel()),
                # the same row everywhere, asked for or returned (a clamp inside forward)
                "constant": not padding and (bool((flat == first).all()) or bool((vecs == vecs[:, :1]).all())),
                "ascending": bool(idx.shape[-1] > 1 and (flat[:, 1:] > flat[:, :-1]).all())}
    except Exception:
        return None


def _lookups(ctx: Context, model: torch.nn.Module, batch: Any) -> tuple[list[dict[str, Any]], str | None]:
    error = None
    with EmbeddingInputs(model, outputs=True).attached_to() as probe:
        try:
            seed_everything(ctx.seed)
            with torch.no_grad():
                ctx.pipeline.step(model, batch, lambda stage, value, /, **meta: value)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return [s for c in probe.calls if (s := _lookup(c)) is not None], error


def probe_positions(ctx: Context, model: torch.nn.Module) -> PositionProbe:
    """Record the indices every embedding table is looked up with during one step on the golden batch.

    A position table's indices do not depend on the data; a content table's do. A table looked up
    with one row on the golden batch is looked at again on another batch (the next seed's golden
    batch): one whose lookup varies there read constant content (a batch of one whose caption was
    dropped: every word slot the null token), not a missing position signal."""
    lookups, error = _lookups(ctx, model, ctx.batch())
    if error is None and any(look["constant"] for look in lookups):
        try:
            other, err = _lookups(ctx, model, ctx.pipeline.golden_batch(ctx.seed + 1))
        except Exception:  # a pipeline with one golden batch: judge the one
            other, err = [], "no other batch"
        if err is None:
            again = {}
            for look in other:
                again.setdefault(look["module"], []).append(look)
            seen: dict[str, int] = {}
            for look in lookups:
                n = seen[look["module"]] = seen.get(look["module"], -1) + 1
                twins = again.get(look["module"], [])
                if look["constant"] and n < len(twins) and not twins[n]["constant"]:
                    look["constant"], look["varies_with_data"] = False, True
    return PositionProbe(lookups=lookups, error=error)
