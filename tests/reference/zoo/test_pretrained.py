"""The pretrained-start cache: deterministic, keyed, atomic, rebuilt when missing or damaged."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from signalchain import StepOutput
from signalchain.reference.zoo.pretrained import PretrainSpec, cache_path, pretrained_state


class TinyBed:
    """A bed small enough to pre-train in milliseconds: y = W x on fixed random data."""

    name = "tiny"

    def build_model(self, seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))

    def build_optimizer(self, model):
        return torch.optim.AdamW(model.parameters(), lr=1e-2)

    def loader(self, split, seed=0):
        g = torch.Generator().manual_seed(seed)
        while True:
            x = torch.randn(8, 4, generator=g)
            yield x, x.sum(dim=1, keepdim=True)

    def train_step(self, model, optimizer, batch, tap=None):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return StepOutput(loss=loss)


SPEC = PretrainSpec("tiny", TinyBed, {"hidden": 4}, steps=20)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_pretraining_is_cached_keyed_and_deterministic(cache):
    state, meta = pretrained_state(SPEC)
    path = cache_path(SPEC)
    assert path.parent == cache / "signalchain" and path.exists()
    assert float(meta["loss_last10"]) < float(meta["loss_first"])  # it learnt something
    mtime = path.stat().st_mtime_ns
    again, _ = pretrained_state(SPEC)  # a hit: the file is not rewritten
    assert path.stat().st_mtime_ns == mtime
    assert all(torch.equal(state[k], again[k]) for k in state)
    fresh, _ = pretrained_state(SPEC, rebuild=True)  # trained again from scratch: the same weights
    assert all(torch.equal(state[k], fresh[k]) for k in state)
    other = replace(SPEC, steps=21)  # another recipe is another key, another file
    assert cache_path(other) != path and other.key != SPEC.key
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temporary left


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "foreign"])
def test_a_damaged_or_foreign_cache_file_is_rebuilt(damage):
    state, _ = pretrained_state(SPEC)
    path = cache_path(SPEC)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "flip":  # a bit of tensor data (the end of the file) changed: the checksum catches it
        data[-3] ^= 0x10
        path.write_bytes(bytes(data))
    elif damage == "garbage":
        path.write_bytes(b"not a safetensors file")
    else:  # a sound file written for another key
        other = replace(SPEC, steps=3)
        pretrained_state(other)
        path.write_bytes(cache_path(other).read_bytes())
    rebuilt, _ = pretrained_state(SPEC)
    assert all(torch.equal(state[k], rebuilt[k]) for k in state)
    again, _ = pretrained_state(SPEC)  # and the sound copy is back on disk
    assert all(torch.equal(state[k], again[k]) for k in state)
