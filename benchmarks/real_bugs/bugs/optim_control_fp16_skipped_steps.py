"""Control: `grad_norm: inf` on a few steps of a healthy fp16 run whose GradScaler skips them.

facebookresearch/swav#47: a mixed-precision run printed "Gradient overflow. Skipping step, loss
scaler 0 reducing loss scale to ..." a few times per epoch and the user asked whether that is
normal; the maintainers: yes, dynamic loss scaling raises the scale until the scaled gradients
overflow, skips that step and halves the scale, so an occasional skip (an infinite gradient norm
in the logs) is the scaler working. Reproduced as a user's own float16 loop (CPU autocast to
float16, `torch.amp.GradScaler("cpu", growth_interval=5)`) around a small reference model, watched
by signalchain's `Monitor` with the scaler, logging every step the way HF's Trainer writes
`trainer_state.json` (`grad_norm` is `Infinity` on a skipped step); the findings are the Monitor's
and `signalchain.history` on that log.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
from pathlib import Path

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

BUG = RealBug(
    name="optim_control_fp16_skipped_steps", thread="https://github.com/facebookresearch/swav/issues/47",
    library="torch", idiom="own fp16 loop + GradScaler, Monitor, HF-style trainer_state.json", cls="control",
    cause="dynamic loss scaling: the scale grows every 5 steps until a scaled float16 gradient overflows; "
          "that step is skipped (grad_norm inf) and the scale halved",
    fix="none needed", kind="control")

STEPS = 40


@functools.lru_cache(maxsize=4)
def run(seed: int) -> dict:
    import signalchain as sc

    torch.manual_seed(seed)
    p = ReferencePipeline(RefConfig(amp="fp16", dim=64, layers=1, heads=2, lr=1e-3))
    model = p.build_model(seed)
    opt = p.build_optimizer(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=5)
    sched = p.scheduler_for(opt)
    monitor = sc.Monitor(model, opt, scaler=scaler, replay=lambda m, b: p.step(m, b).loss)
    loader = p.loader("train", seed)
    log, scales = [], []
    for step in range(STEPS):
        batch = next(loader)
        with monitor.step(batch):
            model.train()
            out = p.step(model, batch)  # autocasts to float16 inside
            scaler.scale(out.loss).backward()
            scaler.unscale_(opt)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if monitor.check(out.loss, grad_norm):
                scaler.step(opt)  # skips the update when the unscaled gradients hold an inf
            scaler.update()
            sched.step()
            opt.zero_grad(set_to_none=True)
        scales.append(scaler.get_scale())
        log.append({"loss": round(float(out.loss), 4), "grad_norm": float(grad_norm),
                    "learning_rate": sched.get_last_lr()[0], "epoch": step / 64, "step": step + 1})
    monitor.close()
    folder = Path(tempfile.mkdtemp(prefix="optim_fp16_"))
    state = {"log_history": log, "global_step": STEPS, "max_steps": STEPS, "logging_steps": 1}
    (folder / "trainer_state.json").write_text(json.dumps(state))  # json writes inf as Infinity, as HF's does
    found = [f.to_dict() for f in monitor.findings] + [f.to_dict() for f in sc.history(folder).findings]
    return {"log": log, "scales": scales, "findings": found}


def findings(fixed: bool, seed: int) -> list[dict]:
    return run(seed)["findings"]


def shows(fixed: bool) -> tuple[bool, str]:
    """The innocent sign: some logged gradient norms are inf, each followed by a halved scale, and the
    run still learns (the loss falls) with every weight finite."""
    r = run(0)
    norms = [e["grad_norm"] for e in r["log"]]
    inf = [i for i, g in enumerate(norms) if math.isinf(g)]
    halved = all(r["scales"][i] < (r["scales"][i - 1] if i else 2.0**16) for i in inf)
    losses = [e["loss"] for e in r["log"]]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    ok = 1 <= len(inf) <= STEPS // 4 and halved and last < first
    return ok, (f"grad_norm inf on steps {inf} of {STEPS} (scale halved each time: {halved}); "
                f"loss {first:.3f} -> {last:.3f}")
