"""Read what a pipeline's `generate` and `decode` hand back, whatever their convention (DESIGN §3).

Real stacks differ: the reference's `generate` returns a result with `.codes`; the HF integration a
dict `{"tokens", "audio", "sample_rate"}`; HF's own `model.generate` returns audio values only (or,
with `return_dict_in_generate`, a `ModelOutput` whose `sequences` holds the *audio*); a symbolic
model returns token ids. `read_generated` sorts any of them into codes `[B, K, T]` (integers), audio
`[B, C, S]` (floats) and a sample rate, telling the two apart by dtype, never by the key's name
alone. `call_decode` calls `decode(tokens, model)` when the pipeline's decode takes the model and
`decode(tokens)` otherwise, and reads audio out of what it returns.

Every experiment that calls `generate` or `decode` goes through these two.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .._tensor import is_array, to_numpy

__all__ = ["Generated", "read_generated", "generated_field", "call_decode", "decode_takes_model", "audio_of",
           "CODE_KEYS", "AUDIO_KEYS"]

#: Where a result may keep its codes / its audio (a key of a dict or ModelOutput, or an attribute).
CODE_KEYS = ("codes", "tokens", "audio_codes", "sequences", "ids", "generated")
AUDIO_KEYS = ("audio", "audio_values", "waveform", "wav", "samples", "sequences")
RATE_KEYS = ("sample_rate", "sampling_rate", "sr")


class Generated(NamedTuple):
    """What `generate` returned, sorted: codes `[B, K, T]` int, audio `[B, C, S]` float (numpy), rate."""

    codes: np.ndarray | None
    audio: np.ndarray | None
    sample_rate: int | None

    def describe(self) -> str:
        """"codes [2, 4, 50] and audio [2, 1, 16000]" — for a message saying what came back."""
        parts = [f"{n} {list(v.shape)}" for n, v in (("codes", self.codes), ("audio", self.audio)) if v is not None]
        return " and ".join(parts) or "neither codes nor audio"


def _lookup(result: Any, key: str) -> Any:
    if isinstance(result, Mapping):
        try:
            return result.get(key)
        except Exception:
            return None
    if isinstance(result, (str, bytes)) or is_array(result):
        return None
    try:
        return getattr(result, key, None)
    except Exception:
        return None


def _as_array(value: Any) -> np.ndarray | None:
    if value is None or isinstance(value, (str, bytes)):
        return None
    if is_array(value):
        return np.asarray(to_numpy(value))
    return None


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iub"


def _codes(x: np.ndarray, batch: int | None, codebooks: int | None) -> np.ndarray | None:
    """Integer arrays as `[B, K, T]`: `[B, K, T]` as is, `[B*K, T]` (HF's decoder-only layout) when
    B or K is known, `[B, T]` (one codebook) otherwise."""
    if not _is_int(x) or x.ndim not in (2, 3) or x.size == 0:
        return None
    if x.ndim == 3:
        return x
    if codebooks and x.shape[0] % codebooks == 0 and (batch is None or x.shape[0] == batch * codebooks):
        return x.reshape(x.shape[0] // codebooks, codebooks, x.shape[1])
    if batch and x.shape[0] % batch == 0 and x.shape[0] != batch:
        return x.reshape(batch, x.shape[0] // batch, x.shape[1])
    return x[:, None, :]


def _audio(x: np.ndarray) -> np.ndarray | None:
    """Float arrays as `[B, C, S]` (`[S]` -> `[1, 1, S]`, `[B, S]` -> `[B, 1, S]`)."""
    if x.dtype.kind not in "fc" or x.ndim not in (1, 2, 3) or x.size == 0:
        return None
    x = np.real(x) if x.dtype.kind == "c" else x
    return x.reshape(1, 1, -1) if x.ndim == 1 else x[:, None, :] if x.ndim == 2 else x


def read_generated(result: Any, sample_rate: int | None = None, *, batch: int | None = None,
                   codebooks: int | None = None) -> Generated:
    """Sort `result` into (codes, audio, sample_rate); absent parts are None, nothing raises.

    `result` may be a tensor/array (integer: codes; float: audio), a dict or `ModelOutput`, an object
    with such attributes (the reference's `GenerationResult`), or a tuple/list of these. `sample_rate`
    is the fallback rate (the pipeline's); `batch`/`codebooks` help read flat `[B*K, T]` codes.
    """
    codes: np.ndarray | None = None
    audio: np.ndarray | None = None
    rate: int | None = None

    def take(value: Any) -> None:
        nonlocal codes, audio
        x = _as_array(value)
        if x is None:
            return
        if codes is None and _is_int(x):
            codes = _codes(x, batch, codebooks)
        elif audio is None and x.dtype.kind in "fc":
            audio = _audio(x)

    if is_array(result):
        take(result)
    elif isinstance(result, (tuple, list)) and not isinstance(result, Mapping):
        for item in result:
            if is_array(item):
                take(item)
            else:
                inner = read_generated(item, batch=batch, codebooks=codebooks)
                codes = codes if codes is not None else inner.codes
                audio = audio if audio is not None else inner.audio
                rate = rate or inner.sample_rate
    elif result is not None:
        for key in dict.fromkeys(CODE_KEYS + AUDIO_KEYS):
            take(_lookup(result, key))
        for key in RATE_KEYS:
            value = _lookup(result, key)
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and value > 0:
                rate = int(value)
                break
    return Generated(codes=codes, audio=audio, sample_rate=rate or (int(sample_rate) if sample_rate else None))


def generated_field(result: Any, name: str) -> Any:
    """A scalar field of a generate result (`frames_generated`, `stopped`, `prompt_frames`), or None."""
    if is_array(result) or isinstance(result, (tuple, list, str, bytes)):
        return None
    value = _lookup(result, name)
    return value if value is None or isinstance(value, (bool, int, float, np.integer, np.floating)) else None


def _parameters(fn: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def decode_takes_model(pipeline: Any) -> str | None:
    """How the pipeline's decode takes the model: "keyword" (a parameter named `model`), "positional"
    (a second positional parameter or *args), or None (`decode(tokens)` only, or no signature)."""
    params = _parameters(getattr(pipeline, "decode", None))
    if params is None:
        return None
    if any(p.name == "model" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return "positional"
    return None


def _model_required(pipeline: Any) -> bool:
    params = _parameters(getattr(pipeline, "decode", None)) or []
    for p in params:
        if p.name == "model" or (p is not params[0] and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)):
            return p.default is inspect.Parameter.empty
    return False


def call_decode(pipeline: Any, tokens: Any, model: Any = None) -> Any:
    """`pipeline.decode(tokens, model)` when its decode takes the model, else `pipeline.decode(tokens)`;
    the audio of what it returns (a tensor as is; a dict/`ModelOutput`'s `audio_values`/`audio`).

    A decode that requires the model while none is at hand raises a TypeError that says so.
    """
    how = decode_takes_model(pipeline)
    if how is not None and model is None and _model_required(pipeline):
        raise TypeError("the pipeline's decode(tokens, model) needs the model and none was given")
    if how == "keyword" and model is not None:
        out = pipeline.decode(tokens, model=model)
    elif how == "positional" and model is not None:
        out = pipeline.decode(tokens, model)
    else:
        out = pipeline.decode(tokens)
    return audio_of(out)


def audio_of(decoded: Any) -> Any:
    """The audio tensor/array in what decode returned (itself when it is one)."""
    if is_array(decoded) or decoded is None:
        return decoded
    for key in ("audio_values", "audio", "waveform", "wav", "samples"):
        value = _lookup(decoded, key)
        if is_array(value):
            return value
    if isinstance(decoded, (tuple, list)) and decoded and is_array(decoded[0]):
        return decoded[0]
    return decoded
