"""The reference model's generate with and without its key/value cache, as ratios measured in one run.

    .venv/bin/python benchmarks/bench_generate_cache.py [--repeats 3]

For a few settings (the doctor's: 2 prompts, 50 frames, guidance 3; unguided; 150 frames), prints the
CPU seconds (process time: less sensitive to other work on the machine than wall time) of
`generate(..., use_cache=False)` (the whole prefix re-run each step) and of the cached path, the ratio,
and whether both gave the same tokens. With the cache a step costs one position, so the ratio grows
with the number of frames.
"""

from __future__ import annotations

import argparse
import time

import torch

from signalchain.reference import ReferencePipeline
from signalchain.reference.generate import SamplingConfig, generate

SETTINGS = (("doctor: 2 prompts, 50 frames, cfg 3", 2, 50, 3.0), ("unguided, 50 frames", 2, 50, 1.0),
            ("8 prompts, 50 frames, cfg 3", 8, 50, 3.0), ("2 prompts, 150 frames, cfg 3", 2, 150, 3.0))


def cpu_seconds(repeats: int, *args, **kwargs) -> tuple[float, object]:
    """The fastest of `repeats` calls of generate(*args, **kwargs), in CPU seconds, and its result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.process_time()
        out = generate(*args, **kwargs)
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = ReferencePipeline()
    model = p.build_model(0).eval()
    captions = list(p.golden_batch(0).captions)
    for label, b, frames, coef in SETTINGS:
        ids, mask = p.tokenizer.encode((captions * 4)[:b])
        with torch.no_grad():
            cond, cond_mask = model.encode_condition(ids, mask)
        cfg = SamplingConfig(max_frames=frames, cfg_coef=coef, keep_logits=True)
        full, a = cpu_seconds(args.repeats, model, cond, cond_mask, cfg, use_cache=False)
        cached, c = cpu_seconds(args.repeats, model, cond, cond_mask, cfg, use_cache=True)
        same = torch.equal(a.codes, c.codes)  # type: ignore[attr-defined]
        print(f"{label:32s} full prefix {full * 1000:7.0f} ms · cached {cached * 1000:6.0f} ms CPU · "
              f"{full / cached:4.1f}x · same tokens: {same}")


if __name__ == "__main__":
    main()
