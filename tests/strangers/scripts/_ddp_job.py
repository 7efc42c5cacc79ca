"""The job `torchrun_own_ddp` launches: a hand-written DDP loop over HF MusicGen in the style of public
torchrun fine-tunes (init_process_group, DistributedDataParallel, a DistributedSampler, gradient
accumulation with `no_sync()` on all but the last micro-batch, clip_grad_norm_), with signalchain as
the README says for an own loop: `Monitor` (its check before the update), `RankWatch` (sections, an
exchange every 2 steps) and the watchdog, whose stall hook is the rank watch's.

    python -m torch.distributed.run --nproc_per_node 2 _ddp_job.py SEED OUT_DIR

OUT_DIR/rank<R>.json: the rank's findings and what its training did.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import signalchain
from signalchain.monitor import RankWatch
from strangers import _bed

STEPS, BATCH, ACCUMULATE = 3, 2, 2


def main() -> None:
    seed, out = int(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result: dict = {"error": None, "world": dist.get_world_size()}
    try:
        torch.manual_seed(seed)
        net = _bed.model(seed)
        data = _bed.Rows(net, STEPS * BATCH * ACCUMULATE * 2, seed, _bed.labels_truncated)
        net.freeze_audio_encoder()
        net.freeze_text_encoder()
        before = _bed.trainable_copy(net)
        model = DDP(net)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        sampler = torch.utils.data.distributed.DistributedSampler(data, seed=seed)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler, collate_fn=_bed.Collate(-100))
        monitor = signalchain.Monitor(model, opt, replay=lambda m, b: m(**b).loss)
        rw = RankWatch(model, every=2)
        losses, step = [], 0
        with signalchain.watchdog(timeout=120, stall_hooks=[rw.on_stall]) as wd:
            batches = iter(loader)
            for step in range(STEPS):
                with monitor.step():
                    for micro in range(ACCUMULATE):
                        batch = next(batches)
                        if micro == 0:
                            monitor.use_batch(batch)
                        last = micro == ACCUMULATE - 1
                        with contextlib.nullcontext() if last else model.no_sync():
                            with rw.section("forward"):
                                loss = model(**batch).loss / ACCUMULATE
                            with rw.section("backward"):
                                loss.backward()
                    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    with rw.section("optimizer"):
                        if monitor.check(loss, norm):
                            opt.step()
                        opt.zero_grad()
                losses.append(float(loss.detach()) * ACCUMULATE)
                rw.step_end(step)
                wd.beat(step)
        rw.close()
        result.update(findings=_bed.findings_of([*monitor.findings, *rw.findings, *wd.findings]), steps=STEPS,
                      losses=losses, moved=_bed.trainable_moved(net, before))
    except Exception as exc:  # the bed reads the error rather than a missing file
        result.update(error=f"{type(exc).__name__}: {exc}"[:1000], findings=[], steps=0, losses=[], moved=None)
    (out / f"rank{rank}.json").write_text(json.dumps(result, default=str))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
