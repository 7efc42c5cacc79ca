"""How fast the reference bed makes its data: the codec's round trip and clip synthesis, as multiples
of real time measured in one run (these were print-only tests; a timing is a benchmark, not a test).

    python benchmarks/bench_reference_data.py
"""

from __future__ import annotations

import time

import numpy as np
import soxr

from signalchain.reference.codec import default_codec
from signalchain.reference.data import generate_clip

SR = 16000


def main() -> None:
    codec = default_codec()
    clips = [generate_clip(9040 + i) for i in range(3)]
    x = np.concatenate([soxr.resample(c.audio.mean(0), c.sample_rate, SR).astype(np.float32) for c in clips])
    x = np.pad(x[: 10 * SR], (0, max(0, 10 * SR - x.shape[0])))
    codec.decode(codec.encode(x))  # warm-up
    t0 = time.perf_counter()
    codes = codec.encode(x)
    t1 = time.perf_counter()
    codec.decode(codes)
    t2 = time.perf_counter()
    print(f"codec, 10 s of audio: encode {10 / (t1 - t0):.0f} x real time, decode {10 / (t2 - t1):.0f} x real time")
    generate_clip(0)
    t0 = time.perf_counter()
    made = [generate_clip(i, seconds=8.0) for i in range(8)]
    elapsed = time.perf_counter() - t0
    print(f"synthesis, 8 clips x 8 s ({sum(c.audio.shape[0] for c in made)} channels): "
          f"{64 / elapsed:.0f} x real time")


if __name__ == "__main__":
    main()
