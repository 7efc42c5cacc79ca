"""Cost of `tap` outside a recording, against an empty function call, measured in one run.

    .venv/bin/python benchmarks/bench_tap.py

Prints nanoseconds per call and the ratio to a bare Python call (the floor any hook costs).
"""

from __future__ import annotations

import timeit

import torch

from signalchain import record, tap


def noop(stage, value, /, **meta):
    return value


def main(n: int = 1_000_000, repeat: int = 5) -> None:
    x = torch.zeros(8, 4, 200, dtype=torch.long)
    cases = {
        "empty function call": lambda: noop("tokens", x),
        "tap (no recording)": lambda: tap("tokens", x),
        "tap with meta (no recording)": lambda: tap("audio.original", x, sample_rate=32000),
    }
    best = {}
    for name, fn in cases.items():
        best[name] = min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e9
    base = best["empty function call"]
    print(f"{'case':32s} {'ns/call':>9s} {'× empty call':>13s}")
    for name, ns in best.items():
        print(f"{name:32s} {ns:9.1f} {ns / base:13.2f}")
    with record() as _:
        t = min(timeit.repeat(lambda: tap("tokens", x), number=2000, repeat=3)) / 2000 * 1e6
    print(f"{'tap inside record() (summary)':32s} {t * 1000:9.0f} (for an 8×4×200 int tensor)")
    worst = max(v for k, v in best.items() if k.startswith("tap"))
    print(f"\noutside a recording tap costs {worst:.0f} ns per call (budget: well under 1000 ns)")


if __name__ == "__main__":
    main()
