"""A hand-written DDP loop on 2 gloo ranks that obeys `Monitor.check()`: rank 1's loss is made NaN at
step 3 by a term that no gradient flows through, so the all-reduced gradient stays finite. Each rank
writes rank<R>.json: its findings, its summary and a digest of its weights."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from signalchain import Monitor


def main(scenario: str, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result: dict = {"error": None}
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        model = DDP(net)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        monitor = Monitor(model, opt, on_finding=lambda f: None)
        g = torch.Generator().manual_seed(100 + rank)
        for step in range(6):
            x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
            with monitor.step((x, y)):
                loss = torch.nn.functional.mse_loss(model(x), y)
                if scenario == "nan" and rank == 1 and step == 3:
                    loss = loss + torch.tensor(float("nan"))  # the loss only: no gradient flows through it
                loss.backward()
                if monitor.check(loss):
                    opt.step()
                opt.zero_grad()
        digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters())).hexdigest()
        result.update(findings=[f.to_dict() for f in monitor.findings], summary=monitor.summary(),
                      kept=monitor.kept, weights=digest)
    except Exception as exc:  # the test reads the error rather than a missing file
        result["error"] = f"{type(exc).__name__}: {exc}"
    (out / f"rank{rank}.json").write_text(json.dumps(result, default=str))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
