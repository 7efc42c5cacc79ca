"""(e) An Accelerate loop written like parler-tts's training script: `Accelerator(mixed_precision="bf16",
gradient_accumulation_steps=2)` on the CPU, a DataLoader and scheduler prepared by it, and per batch
`accelerator.accumulate(model)` → forward → `accelerator.backward` → `clip_grad_norm_` when the
gradients sync → `optimizer.step()` / `lr_scheduler.step()` / `optimizer.zero_grad()` on every
micro-batch (Accelerate's wrappers make the non-syncing ones no-ops). Labels: the full pattern with the
pad id as BOS/EOS and -100 padding. signalchain as the README says for an own loop: `Monitor` with a
replay, `monitor.step(batch)` around each batch and `monitor.check(loss)` before the update, inside
`signalchain.watchdog`.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

import signalchain

from .. import _bed

IDIOM = "Accelerate loop (parler-tts): bf16, accumulate(2), clip_grad_norm_, Monitor + watchdog"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH, ACCUMULATE = 3, 2, 2


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_full, poison: int | None = None) -> _bed.Run:
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    accelerator = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=ACCUMULATE)
    set_seed(seed)
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH * ACCUMULATE, seed, labels)
    net.freeze_audio_encoder()
    net.freeze_text_encoder()
    before = _bed.trainable_copy(net)
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.99),
                                  weight_decay=0.01)
    scheduler = transformers.get_scheduler("constant_with_warmup", optimizer, num_warmup_steps=1,
                                           num_training_steps=STEPS)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, collate_fn=_bed.Collate(-100))
    net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)

    monitor = signalchain.Monitor(net, optimizer, replay=lambda m, b: m(**b).loss)
    losses, step = [], 0
    net.train()
    with signalchain.watchdog(timeout=120) as wd:
        for i, batch in enumerate(loader):
            if poison is not None and i == poison:  # a fault for the can-fail tests: one batch's labels all ignored
                batch["labels"] = torch.full_like(batch["labels"], -100)
            with accelerator.accumulate(net), monitor.step(batch):
                loss = net(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(net.parameters(), 1.0)
                if monitor.check(loss):
                    optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                step += 1
                losses.append(float(loss.detach()))
                wd.beat(step)
    accelerator.end_training()
    found = [*monitor.findings, *wd.findings]
    return _bed.Run("accelerate_parler", seed, _bed.findings_of(found), step, losses,
                    _bed.trainable_moved(accelerator.unwrap_model(net), before))
