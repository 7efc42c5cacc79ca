"""One real Lightning DDP run (2 CPU ranks, gloo) watched by signalchain's callback, as a script.

    python _lightning_ddp.py SCENARIO OUT_DIR

Lightning's "ddp" strategy starts rank 1 by running this same script again (LOCAL_RANK=1), so
everything a rank needs is decided here from the scenario and the rank. Each rank writes
OUT_DIR/rank<R>.json: its callback's findings (rank 0's include what the rank watch gathered).
The model holds a registered buffer (a causal mask, as music LMs do), so DDP broadcasts it at the
start of every forward (a collective inside forward), and the trainer keeps Lightning's default
logger (on ranks > 0 a stand-in). Scenarios, each fault injected for real on rank 1:
  clean      nothing
  straggler  rank 1's dataset sleeps 40 ms per item fetched (its loader section)
  nudge      rank 1 adds 1e-3 to `net.2.weight` after step 6's update
  blocked    rank 1 blocks in training_step at step 9, forever (the watchdog of rank 0 names it)
  nan        rank 1's training_step takes the log of a negative input at step 7 (NaN from its batch)
  reduce0    rank 0 alone all-reduces its loss for logging at step 7 (`if rank == 0`), with the
             collective check on (SIGNALCHAIN_CHECK_COLLECTIVES=1): rank 1 goes on to DDP's gradient
             all-reduce, and the check names both calls instead of gloo aborting
A hang scenario writes its result once a `dist.*` finding is in (or a deadline passes), waits
(bounded) until every rank has written, and leaves with os._exit: the ranks are hung by design.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from signalchain.integrations.lightning import SignalchainCallback

STEPS, EVERY, NUDGE_STEP, HANG_STEP, NAN_STEP = 30, 5, 6, 9, 7
WATCHDOG_S = 1.5
SCENARIO, OUT = sys.argv[1], sys.argv[2]
RANK = int(os.environ.get("LOCAL_RANK", "0"))  # set by Lightning for the rank it starts
WATCHED: list[bool] = []  # per step: the callback's session has a rank watch (it exchanges across ranks)


class Items(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=g), torch.randn(n, 4, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if SCENARIO == "straggler" and RANK == 1:
            time.sleep(0.01)  # 4 items a batch: 40 ms of data loading per step, on this rank only
        return self.x[i], self.y[i]


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        self.register_buffer("causal", torch.tril(torch.ones(4, 4)))  # DDP broadcasts it in every forward

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if SCENARIO == "blocked" and self.global_rank == 1 and self.global_step == HANG_STEP:
            time.sleep(600)  # blocks past every timeout; the report thread ends the process
        x, y = batch
        if SCENARIO == "nan" and self.global_rank == 1 and self.global_step == NAN_STEP:
            x = torch.log(x - 10.0)  # every input is below 10: NaN, from this rank's batch only
        loss = torch.nn.functional.mse_loss(self.net(x) @ self.causal, y)
        if SCENARIO == "reduce0" and self.global_rank == 0 and self.global_step == NAN_STEP:
            dist.all_reduce(loss.detach().reshape(1))  # a logging reduce under `if rank == 0`
        return loss

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        session = CALLBACK[0].session if CALLBACK else None
        WATCHED.append(session is not None and session._rank_watch is not None)
        if SCENARIO == "nudge" and self.global_rank == 1 and self.global_step == NUDGE_STEP + 1:
            with torch.no_grad():
                self.net[2].weight.add_(1e-3)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


CALLBACK: list[SignalchainCallback] = []


def dump(findings: list, extra: dict | None = None) -> None:
    path = os.path.join(OUT, f"rank{RANK}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump({"findings": [f.to_dict() for f in findings], **(extra or {})}, fh)
    os.replace(path + ".tmp", path)


def report_when_found(cb: SignalchainCallback) -> None:
    """The hang scenarios: wait for the verdict, write it, wait for the peer's, leave."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not any(f.id.startswith("dist.") for f in cb.findings):
        time.sleep(0.05)
    time.sleep(0.5)  # the peer reads this rank's published state too
    dump(cb.findings)
    until = time.monotonic() + 15.0
    while time.monotonic() < until and not all(os.path.exists(os.path.join(OUT, f"rank{r}.json")) for r in (0, 1)):
        time.sleep(0.05)
    os._exit(0)


def main() -> None:
    torch.set_num_threads(1)
    if SCENARIO == "reduce0":
        os.environ["SIGNALCHAIN_CHECK_COLLECTIVES"] = "1"
    cb = SignalchainCallback(out_dir=os.path.join(OUT, "live"), every=EVERY, golden=False,
                             watchdog_timeout=WATCHDOG_S, first_timeout=60.0)
    CALLBACK.append(cb)
    if SCENARIO == "blocked":
        threading.Thread(target=report_when_found, args=(cb,), daemon=True).start()
    loader = torch.utils.data.DataLoader(Items(STEPS * 4 * 2), batch_size=4)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=STEPS,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[cb], default_root_dir=OUT)
    error = None
    try:
        trainer.fit(Net(), loader)
    except Exception as exc:  # reduce0: the check's verdict on rank 0, a closed connection on rank 1
        error = f"{type(exc).__name__}: {exc}"
    dump(cb.findings, {"steps": int(trainer.global_step), "world": int(trainer.world_size),
                       "rank_watched": bool(WATCHED) and all(WATCHED), "error": error})
    if error is not None:  # the peer may wait inside a collective: closing this rank's group releases it
        threading.Thread(target=dist.destroy_process_group, daemon=True).start()
        until = time.monotonic() + 15.0
        while time.monotonic() < until and not all(os.path.exists(os.path.join(OUT, f"rank{r}.json")) for r in (0, 1)):
            time.sleep(0.05)
        os._exit(0)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
