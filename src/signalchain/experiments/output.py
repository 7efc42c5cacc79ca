"""The output route, driven end to end: generate, decode, write and read back (the pipeline's
`render`, in a temporary folder), a probe of the decoder alone, and files measured as a player
reads them (`audio.measure.measure_file`, also what `signalchain listen` runs on any file).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._tensor import to_numpy
from ..audio.features import log_mel, spectral_similarity
from ..audio.measure import measure_file
from ..checks._util import as_bool_mask
from ..pipeline import capabilities
from ..records.output import DecoderProbe, RouteMeasurement
from ..trace import Trace, record, tap
from ._outputs import call_decode, read_generated
from ._seed import seed_everything
from .context import Context
from .generation.runs import call_generate, take

__all__ = ["measure_route", "probe_decoder", "silence_pattern"]

ROUTE = {"generation.tokens", "audio.decoded", "audio.written"}


def silence_pattern(trace: Trace) -> list[int] | None:
    """The frame of codes the training tokens hold where the audio is padding (silence), if any."""
    tokens, pad = trace.get("tokens"), trace.get("mask.padding")
    if tokens is None or pad is None or tokens.value is None or pad.value is None:
        return None
    codes = np.asarray(tokens.value)
    if codes.ndim != 3:
        return None
    valid = as_bool_mask(np.asarray(pad.value, bool), codes.shape)[:, 0]  # [B, T] or [B, K, T] -> frames [B, T]
    if valid.all():
        return None
    frames = codes.transpose(0, 2, 1)[~valid]  # [N, K]
    patterns, counts = np.unique(frames, axis=0, return_counts=True)
    return [int(v) for v in patterns[int(np.argmax(counts))]]


def _per_example_dbfs(rec: Any) -> list[float]:
    return [float(e["rms_dbfs"]) for e in rec.summary.get("audio", {}).get("examples", [])] if rec is not None else []


def measure_route(ctx: Context) -> tuple[RouteMeasurement, Trace] | None:
    """Render a few golden prompts with a fresh model (or generate + decode without `render`)."""
    p = ctx.pipeline
    caps = capabilities(p)
    if "render" not in caps and not {"generate", "decode"} <= caps:
        return None
    model, batch = ctx.fresh_model(), take(ctx.batch(), ctx.budget.gen_prompts)
    sampling = {"max_frames": min(ctx.budget.gen_frames, 50), "seed": ctx.seed}
    error, files = None, []
    audio_only: str | None = None
    seed_everything(ctx.seed)
    with tempfile.TemporaryDirectory(prefix="signalchain-render-") as folder, record(values=ROUTE, stages=ROUTE) as t:
        try:
            if "render" in caps:
                p.render(model, batch, folder, sampling, tap)
            else:
                result = call_generate(p, model, batch, sampling)
                got = read_generated(result, getattr(p, "sample_rate", None))
                tapped = t.get("generation.tokens")
                codes = got.codes if got.codes is not None else (
                    np.asarray(tapped.value) if tapped is not None and tapped.value is not None else None)
                if codes is not None and "generation.tokens" not in t:  # generate may tap it itself
                    tap("generation.tokens", codes)
                if codes is None:
                    audio_only = got.describe()
                if got.audio is not None:  # generate decodes itself (HF's does): its audio is the route's
                    tap("audio.decoded", got.audio, sample_rate=got.sample_rate, source="generate")
                elif codes is not None:
                    tap("audio.decoded", call_decode(p, torch.as_tensor(codes), model),
                        sample_rate=getattr(p, "sample_rate", None))
        except Exception as exc:  # the route may break (a decoder refusing codes): that is the finding
            error = f"{type(exc).__name__}: {exc}"
        written = t.get("audio.written")
        paths = written.meta.get("files") if written is not None else None
        paths = paths or sorted(str(q) for q in Path(folder).rglob("*") if q.is_file())
        files = [measure_file(q) for q in paths]
    for f in files:  # the folder is temporary: name the files as the pipeline named them
        f.path = Path(f.path).name
    golden = ctx.golden().trace
    tokens = t.get("generation.tokens")
    codes = np.asarray(tokens.value) if tokens is not None and tokens.value is not None else np.zeros((0, 0, 0), int)
    card = (tokens.meta.get("cardinality") if tokens is not None else None) or \
        (golden["tokens"].meta.get("cardinality") if "tokens" in golden else None)
    bad = (codes < 0) | (codes >= card) if card is not None and codes.size else np.zeros(codes.shape, bool)
    pattern = silence_pattern(golden)
    silent = None
    if pattern is not None and codes.ndim == 3 and codes.shape[1] == len(pattern) and codes.size:
        silent = float((codes == np.array(pattern)[None, :, None]).all(axis=1).mean())
    decoded = t.get("audio.decoded")
    rate = decoded.sample_rate if decoded is not None else None
    route = RouteMeasurement(tokens_shape=list(codes.shape), cardinality=int(card) if card is not None else None,
                        invalid=int(bad.sum()), special=sorted({int(v) for v in codes[bad]})[:10],
                        silence_pattern=pattern, silent_frames=silent, decoded_dbfs=_per_example_dbfs(decoded),
                        decoded_clipping=float(decoded.summary.get("audio", {}).get("clipping_fraction_max", 0.0))
                        if decoded is not None else 0.0,
                        decoded_rate=rate or getattr(p, "sample_rate", None),
                        written_dbfs=_per_example_dbfs(t.get("audio.written")), files=files, error=error,
                        audio_only=audio_only)
    return route, t


def probe_decoder(ctx: Context, window: int = 6) -> DecoderProbe | None:
    """Decode the golden tokens of the longest example, then again with one frame's codes replaced by
    another frame's, at a few places; a decoder that reads the layout right changes the spectrum
    only near the changed frame. Reports the worst (largest) share of the change that lands far away."""
    p = ctx.pipeline
    trace = ctx.golden().trace
    if "decode" not in capabilities(p) or "tokens" not in trace or trace["tokens"].value is None:
        return None
    codes = np.asarray(trace.value("tokens"))
    if codes.ndim != 3 or codes.shape[-1] < 4 * window:
        return None
    pad = trace.get("mask.padding")
    row = int(np.asarray(pad.value).sum(1).argmax()) if pad is not None and pad.value is not None else 0
    a = codes[row : row + 1]
    T = a.shape[-1]
    sr = int(getattr(p, "sample_rate", 0) or 16000)

    model = ctx.golden().model  # a decode(tokens, model) decodes with the model's own codec

    def decoded(x: np.ndarray) -> np.ndarray:
        audio = np.asarray(to_numpy(call_decode(p, torch.as_tensor(x), model)), dtype=np.float64)
        # [1, C, S] / [C, S] / [S]: time is the last axis; channels are kept apart, never laid end to
        # end (a stereo decode flattened would put the right channel after the left, far from frame t0).
        return audio.reshape(-1, audio.shape[-1])  # [C, S]

    def spectrum(audio: np.ndarray) -> np.ndarray:
        hop = max(1, audio.shape[-1] // T)  # samples per token frame
        return log_mel(audio.mean(0), sr, n_fft=4 * hop, hop=hop, n_mels=32)  # [M, ≈T]

    def far_share(diff: np.ndarray, t0: int) -> float | None:
        pos = np.arange(len(diff)) * T / max(len(diff), 1)
        total = float(diff.sum())
        return float(diff[np.abs(pos - t0) > window].sum()) / total if total > 0 else None

    worst, changed = None, []
    try:
        trip = _round_trip(trace, codes, decoded, sr)
        base_audio = decoded(a)
        base = spectrum(base_audio)
        for t0 in (T // 5, T // 2, 4 * T // 5):
            src = next((s for s in (t0 - T // 10, t0 + T // 10, 0) if not (a[0, :, s] == a[0, :, t0]).all()), None)
            if src is None:
                continue
            b = a.copy()
            b[0, :, t0] = a[0, :, src]
            audio = decoded(b)
            # Where the change lands, seen twice: in the log-mel spectrum (a quiet frame counts as much as
            # a loud one) and in the waveform's energy per token frame (a decoder's own reach, the few
            # frames its convolutions and LSTM carry a change forward, is quiet there). A layout bug moves
            # the change far in both; only the log scale inflates a faint tail, so the smaller share holds.
            spec = far_share(((spectrum(audio) - base) ** 2).mean(0), t0)
            n = audio.shape[-1] // T * T
            energy = ((audio - base_audio)[:, :n] ** 2).sum(0).reshape(T, -1).sum(1) if n else None
            wave = far_share(energy, t0) if energy is not None else None
            shares = [f for f in (spec, wave) if f is not None]
            if shares:
                far = min(shares)
                changed.append(t0)
                worst = far if worst is None else max(worst, far)
    except Exception as exc:
        return DecoderProbe(
            frames=T, changed=changed, far_share=None, window=window, error=f"{type(exc).__name__}: {exc}"
        )
    return DecoderProbe(frames=T, changed=changed, far_share=worst, window=window, **trip)


def _round_trip(trace: Any, codes: np.ndarray, decoded: Any, sr: int) -> dict[str, Any]:
    """The golden tokens decoded against the audio they were made from (the last audio stage tapped
    before `tokens`, at the decoder's rate and length): per example, the level difference (dB) and
    the log-mel correlation. Empty when no such stage is tapped."""
    names = trace.names()
    before = names[: names.index("tokens")] if "tokens" in names else []
    src = next((n for n in reversed(before) if n.startswith("audio.") and trace[n].value is not None
                and trace[n].sample_rate in (None, sr)), None)
    if src is None:
        return {}
    x = np.asarray(trace.value(src), dtype=np.float64)
    if x.ndim < 2 or x.shape[0] != codes.shape[0]:
        return {}
    x = x.reshape(x.shape[0], -1, x.shape[-1]).mean(1)  # [B, S] mono
    y = np.concatenate([decoded(codes[b : b + 1]).mean(0, keepdims=True) for b in range(codes.shape[0])])
    n = min(x.shape[-1], y.shape[-1])
    if n < sr // 10:
        return {}
    gaps, sims = [], []
    for b in range(x.shape[0]):
        xin, yout = x[b, :n], y[b, :n]
        pin, pout = float(np.mean(xin**2)), float(np.mean(yout**2))
        if pin <= 1e-10 or not np.isfinite(pout):
            continue  # a silent (padded) example says nothing about the codec
        gaps.append(10 * np.log10(max(pout, 1e-20) / pin))
        sims.append(spectral_similarity(log_mel(xin, sr), log_mel(yout, sr)))
    return {"round_trip_stage": src, "round_trip_db": gaps, "round_trip_similarity": sims}
