"""Stale data: a loader that repeats itself, and tokens that do not describe the audio they are
paired with (a stale cache, a codebook order). Stale predictions are optimisation/predictions.py."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import numpy as np
import torch

from .._tensor import to_numpy
from ..audio.features import log_mel, spectral_similarity
from ..pipeline import capabilities
from ..stats import as_batch_audio
from ..trace import record, tap
from ._outputs import call_decode, decode_takes_model
from ._seed import seed_everything
from .context import Context

__all__ = ["measure_loader", "measure_token_audio"]


def _example_hashes(audio: np.ndarray) -> list[str]:
    return [hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16] for x in audio]


def measure_loader(ctx: Context, model: torch.nn.Module) -> dict[str, Any]:
    """Consecutive loader batches: content hashes, whole and per example, and for every clip the
    loader brings back (a revisit: the same source audio again) its crop and a hash of its tokens.

    With a few hundred clips a handful of batches already revisits some (the birthday paradox),
    which is exactly when a cache keyed by the clip alone goes stale.
    """
    p = ctx.pipeline
    loader = p.loader("train")
    it = iter(loader)
    batches: list[dict[str, Any]] = []
    seen: dict[str, list[dict[str, Any]]] = {}
    wanted = {"audio.original", "crop", "tokens"}
    for b in range(ctx.budget.loader_batches):
        batch = next(it)
        seed_everything(ctx.seed)
        with record(values=wanted, stages=wanted | {"caption"}) as t, torch.no_grad():
            p.step(model, batch, tap)
        audio = t.value("audio.original") if "audio.original" in t else None
        examples = _example_hashes(audio) if audio is not None else []
        crops = np.asarray(t.value("crop")) if "crop" in t else None
        tokens = np.asarray(t.value("tokens")) if "tokens" in t else None
        for i, h in enumerate(examples):
            if crops is not None and tokens is not None and i < len(crops) and i < len(tokens):
                seen.setdefault(h, []).append({"batch": b, "crop": [int(x) for x in np.ravel(crops[i])[:2]],
                                               "tokens": _example_hashes(tokens[i : i + 1])[0]})
        batches.append({
            "batch": "|".join(t[n].summary["hash"] for n in ("audio.original", "caption", "tokens") if n in t),
            "examples": examples,
        })
    revisits = [v for v in seen.values() if len(v) > 1]
    return {"batches": batches, "revisits": revisits, "train_size": _train_size(p) or _dataset_size(loader)}


def _train_size(p: Any) -> int | None:
    """How many examples the training split lists (None without `splits()` or a training split)."""
    if "splits" not in capabilities(p):
        return None
    try:
        splits = {str(k): v for k, v in p.splits().items()}
        train = splits.get("train")
        if train is None and splits:
            train = max(splits.values(), key=len)
        return None if train is None else len(train)
    except Exception:  # a splits() that fails is the splits family's finding, not this one's
        return None


def _dataset_size(loader: Any) -> int | None:
    """The size of the dataset a loader draws from, where it says (a torch `DataLoader`'s `.dataset`)."""
    try:
        n = len(loader.dataset)
    except Exception:  # no dataset, or one without a length (an IterableDataset)
        return None
    return int(n) if n > 0 else None


def measure_token_audio(ctx: Context) -> dict[str, Any] | None:
    """How well decoded tokens match the audio they were made from, against how well they match the
    other examples' audio (the chance level of this codec), in the given codebook order and reordered.

    `sims[i][j]` is the spectral similarity of decoded example i to the audio of example j: the
    diagonal is each example's own pairing, the rest is what a wrong pairing scores with this codec.
    """
    p = ctx.pipeline
    trace = ctx.golden().trace
    if "decode" not in capabilities(p) or "tokens" not in trace or "audio.cropped" not in trace:
        return None
    tokens = trace.value("tokens")
    heard = trace["audio.cropped"]
    audio = as_batch_audio(heard.value)
    lengths = heard.meta.get("lengths") or [audio.shape[-1]] * audio.shape[0]
    sr_in = heard.sample_rate or getattr(p, "sample_rate", None)
    sr_out = getattr(p, "sample_rate", None) or sr_in
    if not sr_in or not sr_out:
        return None
    rms = [float(np.sqrt(np.mean(np.square(audio[i, :, : lengths[i]], dtype=np.float64)))) if lengths[i] else 0.0
           for i in range(audio.shape[0])]
    # Skip mostly-padding and silent clips: silence decodes to silence whatever the code order.
    keep = [i for i in range(audio.shape[0]) if lengths[i] >= 0.25 * audio.shape[-1] and rms[i] > 1e-3]
    if len(keep) < 2:
        return None
    refs = [log_mel(audio[i, :, : lengths[i]], sr_in) for i in keep]
    model = ctx.fresh_model() if decode_takes_model(p) else None  # decode(tokens, model) needs its codec

    def score(codes: np.ndarray) -> np.ndarray:
        decoded = as_batch_audio(np.asarray(to_numpy(call_decode(p, torch.from_numpy(codes), model)), dtype=np.float32))
        mels = [log_mel(decoded[i, :, : lengths[i]], sr_out) for i in keep]
        return np.array([[spectral_similarity(m, r) for r in refs] for m in mels])  # [decoded, audio]

    sims = score(tokens)
    k = tokens.shape[1]
    identity = tuple(range(k))
    perms = list(itertools.permutations(range(k))) if k <= 4 else [identity[::-1]]
    perm_sims = {identity: sims} | {q: score(tokens[:, list(q)]) for q in perms if q != identity}
    perm_scores = {q: float(np.diag(v).mean()) for q, v in perm_sims.items()}
    best = max(perm_scores, key=perm_scores.__getitem__)
    off = sims[~np.eye(len(keep), dtype=bool)]
    return {"own": np.diag(sims).tolist(), "others_mean": float(off.mean()), "sims": sims.tolist(),
            "own_beaten": int(sum(sims[i, i] <= np.delete(sims[i], i).max() for i in range(len(keep)))),
            "examples": keep, "identity": perm_scores[identity], "best_perm": list(best),
            "best_perm_score": perm_scores[best], "best_perm_own": np.diag(perm_sims[best]).tolist(),
            "best_perm_sims": perm_sims[best].tolist()}
