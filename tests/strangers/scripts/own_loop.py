"""(h) A plain PyTorch loop around HF MusicGen, with signalchain exactly as the README's "Watching a live
training loop" shows: `Monitor(model, optimizer, replay=compute_loss)`, `with monitor.step(batch)`,
`monitor.check(loss)` after backward and before the update, the loss tapped; plus the stall watchdog.
The loop clips the gradient norm and steps a warm-up scheduler after the optimizer; labels -100 in the
pattern's corners and padding. The text encoder is trained with the decoder; the codec is frozen.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

import signalchain
from signalchain import tap

from .. import _bed

IDIOM = "plain loop: Monitor(replay=...) + tap('loss') + watchdog, clip, warm-up after optimizer.step"
ALLOWED: dict[str, str] = {}
SLOW = False
STEPS, BATCH = 4, 2


def compute_loss(model, batch):
    return tap("loss", model(**batch).loss)


def main(seed: int, out: Path, *, lr: float = 1e-4, labels=_bed.labels_ignored, nan_at: int | None = None) -> _bed.Run:
    torch.manual_seed(seed)
    net = _bed.model(seed)
    data = _bed.Rows(net, STEPS * BATCH, seed, labels)
    net.freeze_audio_encoder()
    before = _bed.trainable_copy(net)
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 1, STEPS)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True, collate_fn=_bed.Collate(-100),
                                         generator=torch.Generator().manual_seed(seed))
    monitor = signalchain.Monitor(net, optimizer, replay=compute_loss)
    losses, steps = [], 0
    net.train()
    with signalchain.watchdog(timeout=120) as wd:
        for step, batch in enumerate(loader):
            if nan_at is not None and step == nan_at:  # a fault for the can-fail tests: every label ignored (0/0)
                batch["labels"] = torch.full_like(batch["labels"], -100)
            with monitor.step(batch):
                loss = compute_loss(net, batch)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                if monitor.check(loss):
                    optimizer.step()
                    steps += 1
                scheduler.step()
                optimizer.zero_grad()
            losses.append(float(loss.detach()))
            wd.beat(step)
    monitor.close()
    return _bed.Run("own_loop", seed, _bed.findings_of([*monitor.findings, *wd.findings]), steps, losses,
                    _bed.trainable_moved(net, before))
