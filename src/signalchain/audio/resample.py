"""The one resampler: audio from one sample rate to another, for every non-reference caller."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import soxr

__all__ = ["resample"]


def resample(x: np.ndarray, sr_in: int, sr_out: int, *, method: Literal["soxr", "poly"] = "soxr",
             quality: str = "HQ", time_axis: int = -1) -> np.ndarray:
    """`x` resampled from `sr_in` to `sr_out` Hz along `time_axis` (`x` itself when the rates match).

    Two libraries, on purpose, chosen per caller so that the numbers tests pin stay the same:

    - `method="soxr"` (default): libsoxr at `quality` ("HQ", its default, or "LQ", …), what
      `datasets`' Audio(sampling_rate=) and the browsers' players are compared against: the HF
      loader, the HTML player and the audio fingerprint (LQ: fast, fine for 32 mel bands) use it.
      soxr reads time first; any `time_axis` is moved there and back.
    - `method="poly"`: scipy's exact rational polyphase filter (`resample_poly`, up/down reduced by
      their gcd): deterministic to the sample for any rate pair, which the generation family's
      memorisation fingerprints and "nearest training example" clips were tuned on.

    The dtype is what the library returns (soxr keeps float32/float64; resample_poly gives float64
    for integer input and keeps floats); callers cast as they need.
    """
    sr_in, sr_out = int(sr_in), int(sr_out)
    if sr_in == sr_out:
        return x
    if method == "poly":
        from scipy import signal

        g = math.gcd(sr_in, sr_out)
        return signal.resample_poly(x, sr_out // g, sr_in // g, axis=time_axis)
    if method != "soxr":
        raise ValueError(f"resample method {method!r} is not 'soxr' or 'poly'")
    moved = x if x.ndim == 1 else np.moveaxis(x, time_axis, 0)
    if x.ndim == 1:
        return soxr.resample(np.ascontiguousarray(x), sr_in, sr_out, quality=quality)
    return np.moveaxis(soxr.resample(np.ascontiguousarray(moved), sr_in, sr_out, quality=quality), 0, time_axis)
