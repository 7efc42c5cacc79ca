"""A plain PyTorch loop writing TensorBoard scalars, with the faults injected the way the bugs arise.

Clean: Adam, 10 warm-up steps then cosine decay, gradient clipping at 1.0, shuffled fresh batches,
`train/loss`, `train/lr`, `train/grad_norm`, `train/ce_q1..4` and `epoch` every step, `valid/loss`
every 20 steps. A "crash and resume" reruns the process from the checkpoint of step `RESUME_FROM`
after dying at `CRASH_AT`, logging into the same folder (a new event file), as a requeued job does.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._model import BigramLM, Chains, V, per_codebook_ce

__all__ = ["PLAIN_FAULTS", "train_plain", "STEPS", "CRASH_AT", "RESUME_FROM"]

STEPS, BATCH, WARMUP, EPOCH = 240, 16, 10, 60
CRASH_AT, RESUME_FROM = 130, 120
PLAIN_FAULTS = ("empty_labels_nan", "lr_runaway", "corrupt_batch_spike", "corrupt_shard", "loss_weight_explodes",
                "lr_integer_division", "scheduler_per_epoch", "optimizer_wrong_params", "codebook_logits_detached",
                "upload_blocks", "resume_lexicographic_checkpoint", "resume_fresh_scheduler", "sorted_by_quality")


def _schedule(fault: str | None):
    if fault == "lr_integer_division":
        return lambda s: s // WARMUP // 1000  # integer division: 0 for the whole run
    return lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / STEPS)))


def _batch(step: int, chains: Chains, g: torch.Generator, fault: str | None) -> torch.Tensor:
    x = chains.sample(BATCH, g)
    if fault == "sorted_by_quality":
        # the clips sorted by a quality score and never shuffled: each epoch goes from clean to noisy
        noisy = torch.rand(x.shape, generator=g) < 0.7 * (step % EPOCH) / EPOCH
        x[noisy] = torch.randint(0, V, (int(noisy.sum()),), generator=g)
    return x


def _run(out: Path, fault: str | None, seed: int, start: int, stop: int, state: dict[str, Any] | None,
         resume: str | None) -> dict[int, Any]:
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    chains = Chains(seed)
    g = torch.Generator().manual_seed(seed * 1000 + start)
    model = BigramLM()
    lr = 1e-2
    params = [p.clone().detach().requires_grad_() for p in model.parameters()] \
        if fault == "optimizer_wrong_params" else model.parameters()  # a copy made before a re-wrap
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(fault))
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if resume is None:
            sched.load_state_dict(state["scheduler"])
    valid = chains.sample(64, torch.Generator().manual_seed(seed + 7))
    w = SummaryWriter(str(out), flush_secs=600)
    saved: dict[int, Any] = {}
    for step in range(start, stop):
        if fault == "scheduler_per_epoch" and step % 80 == 0 and step:
            sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(fault))  # rebuilt inside the epoch loop
        x = _batch(step, chains, g, fault)
        labels = x.clone()
        if (fault == "corrupt_batch_spike" and step == 140) or (fault == "corrupt_shard" and step >= 140):
            labels = torch.randint(0, V, x.shape, generator=g)  # a shard whose tokens are not the audio's
        if fault == "empty_labels_nan" and step == 150:
            labels[:] = -100  # every label ignored: the mean over no element
        logits = model.logits(x)
        if fault == "codebook_logits_detached":  # a .detach() left on one codebook's logits
            logits = torch.cat([logits[:, :2], logits[:, 2:3].detach(), logits[:, 3:]], dim=1)
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), labels[:, :, 1:].reshape(-1), ignore_index=-100)
        logged = loss
        if fault == "loss_weight_explodes" and step >= 120:
            loss = loss * 10.0 ** (step - 120)  # a loss weight "warmed up" with no cap
            logged = loss
        opt.zero_grad()
        loss.backward()
        clip = math.inf if fault in ("lr_runaway", "loss_weight_explodes") else 1.0
        norm = float(nn.utils.clip_grad_norm_(model.parameters(), clip))
        if fault == "lr_runaway" and step >= 120:
            for grp in opt.param_groups:
                grp["lr"] = min(grp["lr"] * 3.0, 1e8)  # a schedule that multiplies instead of decaying
        opt.step()
        if fault != "lr_runaway" or step < 120:
            sched.step()
        if fault == "upload_blocks" and step >= 150:
            time.sleep(0.03)  # a checkpoint upload on the training thread
        w.add_scalar("train/loss", float(logged.detach()), step)
        w.add_scalar("train/lr", opt.param_groups[0]["lr"], step)
        w.add_scalar("train/grad_norm", norm, step)
        w.add_scalar("epoch", step / EPOCH, step)
        for k, ce in enumerate(per_codebook_ce(logits, x[:, :, 1:])):
            w.add_scalar(f"train/ce_q{k + 1}", ce, step)
        if step % 20 == 19:
            with torch.no_grad():
                w.add_scalar("valid/loss", float(model(valid)["loss"]), step)
        if step + 1 in (20, RESUME_FROM):
            saved[step + 1] = {"model": {k: v.clone() for k, v in model.state_dict().items()},
                     "optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
    w.close()
    return saved


def train_plain(out: str | Path, fault: str | None = None, seed: int = 0, resumed: bool = False) -> Path:
    """One run into `out`. `resumed`: the clean twin of the resume faults (dies at CRASH_AT, resumes
    from RESUME_FROM with everything restored). `resume_lexicographic_checkpoint` resumes from the
    checkpoint of step 20: `sorted(["ckpt-100", "ckpt-120", "ckpt-20"])[-1]` is "ckpt-20"."""
    out = Path(out)
    if fault in ("resume_lexicographic_checkpoint", "resume_fresh_scheduler") or resumed:
        states = _run(out, fault, seed, 0, CRASH_AT, None, None)
        state = states[20] if fault == "resume_lexicographic_checkpoint" else states[RESUME_FROM]
        mode = "fresh_scheduler" if fault == "resume_fresh_scheduler" else None
        time.sleep(1.1)  # a new event file (TensorBoard names files by the second)
        _run(out, fault, seed, RESUME_FROM, STEPS, state, mode)
    else:
        _run(out, fault, seed, 0, STEPS, None, None)
    return out
