"""`ForwardTap`: a training forward's kwargs, output and loss; evaluation forwards pass untouched."""

from __future__ import annotations

import torch

from signalchain.probes.forward_tap import ForwardTap, call_with, loss_of


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": (self.lin(x).squeeze(-1) - labels).pow(2).mean()}


def test_training_forwards_are_seen_and_replayable() -> None:
    net, seen = Net(), []
    tap = ForwardTap(net, lambda batch, output, loss: seen.append((batch, loss)))
    batch = {"x": torch.ones(3, 2), "labels": torch.zeros(3)}
    out = net(**batch)
    assert len(seen) == 1 and seen[0][0].keys() == batch.keys() and seen[0][1] is out["loss"]
    assert torch.equal(loss_of(call_with(net, seen[0][0])), out["loss"])  # a training forward too
    assert len(seen) == 2
    net.eval()
    net(**batch)
    with torch.no_grad():
        net.train()
        net(**batch)
    assert len(seen) == 2  # evaluation and no-grad forwards are not training steps
    tap.close()
    net(**batch)
    assert len(seen) == 2


def test_loss_of_reads_the_usual_outputs() -> None:
    loss = torch.tensor(2.0)
    assert loss_of(loss) is loss and loss_of((loss, torch.ones(2))) is loss
    assert loss_of({"loss": loss}) is loss and loss_of(torch.ones(3)) is None and loss_of(object()) is None
