"""Does the reference pipeline learn, and does it use its captions?

    .venv/bin/python benchmarks/bench_learning.py [--steps 1500] [--out learn-out]

Trains the reference model on its training split for a few minutes of CPU, then measures the
held-out (validation split) cross-entropy with the true captions, with the captions shuffled
within each batch, and with no caption at all. Conditioning is learnt when true < shuffled by a
clear margin. Also writes a loss curve and generated samples for validation captions (WAV), so the
attributes can be heard.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from signalchain.reference import RefConfig, ReferencePipeline
from signalchain.report.plots import line_figure


def held_out(pipe: ReferencePipeline, model: torch.nn.Module, batches: list, mode: str) -> float:
    """Mean cross-entropy over validation batches with true, shuffled or empty captions."""
    losses = []
    model.eval()
    with torch.no_grad():
        for i, batch in enumerate(batches):
            if mode == "shuffled":
                rng = np.random.default_rng(i)
                caps = list(batch.captions)
                perm = rng.permutation(len(caps))
                while (perm == np.arange(len(caps))).any():  # every example gets another's caption
                    perm = rng.permutation(len(caps))
                batch = pipe.with_captions(batch, [caps[j] for j in perm])
            elif mode == "none":
                batch = pipe.with_captions(batch, [""] * len(batch))
            losses.append(float(pipe.step(model, batch).loss))
    model.train()
    return float(np.mean(losses))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--out", default="learn-out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = RefConfig(lr=2e-3, warmup_steps=50)
    pipe = ReferencePipeline(cfg)
    evaluator = ReferencePipeline(replace(cfg, cond_dropout=0.0))  # the same step, no caption dropout
    torch.manual_seed(args.seed)
    model = pipe.build_model(args.seed)
    opt = pipe.build_optimizer(model)
    cosine = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
    )
    valid_it = evaluator.loader("valid", seed=123)
    valid = [next(valid_it) for _ in range(6)]
    train_it = pipe.loader("train", seed=args.seed)
    curve = {"step": [], "train": [], "valid_true": [], "valid_shuffled": [], "valid_none": []}
    t0 = time.perf_counter()
    recent: list[float] = []
    for step in range(1, args.steps + 1):
        o = pipe.train_step(model, opt, next(train_it))
        cosine.step()
        recent.append(float(o.loss.detach()))
        if step % args.eval_every == 0 or step == args.steps:
            row = {m: held_out(evaluator, model, valid, m) for m in ("true", "shuffled", "none")}
            curve["step"].append(step)
            curve["train"].append(float(np.mean(recent)))
            for m, v in row.items():
                curve[f"valid_{m}"].append(v)
            recent.clear()
            print(
                f"step {step:5d}  train {curve['train'][-1]:.3f}  valid true {row['true']:.3f}  "
                f"shuffled {row['shuffled']:.3f}  none {row['none']:.3f}  ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    seconds = time.perf_counter() - t0
    final = {m: curve[f"valid_{m}"][-1] for m in ("true", "shuffled", "none")}
    margin = final["shuffled"] - final["true"]
    summary = {"steps": args.steps, "seconds": round(seconds, 1), "ln_cardinality": math.log(pipe.codec.cardinality),
               "valid_true": final["true"], "valid_shuffled": final["shuffled"], "valid_none": final["none"],
               "margin_shuffled_minus_true": margin, "curve": curve}
    (out / "learning.json").write_text(json.dumps(summary, indent=1))
    (out / "learning.png").write_bytes(line_figure(
        {k: (curve["step"], curve[k]) for k in ("train", "valid_true", "valid_shuffled", "valid_none")},
        "Reference pipeline: held-out cross-entropy by caption", "step", "nats"))
    # Listen: generate for four validation captions and write them beside their captions.
    batch = evaluator.make_batch(list(evaluator.split_indices("valid"))[:4], seed=0)
    files = pipe.render(model, batch, out / "samples", {"max_frames": 150, "cfg_coef": 3.0, "seed": 0})
    (out / "samples" / "captions.txt").write_text(
        "\n".join(f"{f.name}\t{c}" for f, c in zip(files, batch.captions)) + "\n"
    )
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    print(f"\nheld-out cross-entropy after {args.steps} steps ({seconds:.0f} s): true captions {final['true']:.3f}, "
          f"shuffled {final['shuffled']:.3f}, none {final['none']:.3f}; margin {margin:.3f} nats "
          f"(ln 256 = {math.log(256):.3f})")


if __name__ == "__main__":
    main()
