"""`bisect --checkpoints` on real checkpoint files: the lr spike at step 13, formats, skips, flaky ends.

The golden is captured from the fresh model (`run_golden`, what `signalchain capture` writes): its
loss judges the good end, and its data stages must match every checkpoint's golden run.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from checkpoint_run import TwoGroupPipeline, train
from signalchain.checks.checkpoints import bisect_findings, judge_change
from signalchain.experiments.bisect._checkpoint_files import (
    CheckpointFile,
    CheckpointLoadError,
    find_checkpoints,
    in_step_range,
    load_checkpoint_file,
)
from signalchain.experiments.bisect._probe import load_into
from signalchain.experiments.bisect.checkpoints import bisect_checkpoints
from signalchain.experiments.capture import run_golden

UNPICKLED: list[str] = []


def _mark() -> dict:
    UNPICKLED.append("ran")
    return {}


class Payload:
    """A pickle-only object: unpickling it would call `_mark` (it must never be)."""

    def __reduce__(self):
        return (_mark, ())


def _bisect(pipe, folder, **kw):
    golden = run_golden(pipe, 0)
    return bisect_checkpoints(pipe, find_checkpoints(str(folder)), seed=0, golden=golden.trace,
                              golden_loss=float(golden.output.loss.detach()), **kw)


@pytest.fixture(scope="module")
def spiked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spiked")
    train(folder)
    return folder


def test_the_lr_spike_names_checkpoint_13_and_the_head_groups_second_moment(spiked):
    pipe = TwoGroupPipeline()
    res = _bisect(pipe, spiked)
    assert res.status == "found"
    assert res.checkpoints[res.last_healthy] == "ckpt-012.pt" and res.checkpoints[res.first_unhealthy] == "ckpt-013.pt"
    assert res.runs <= math.ceil(math.log2(20)) + 2
    changes = judge_change(res.pair, res.factor)
    first = changes[0]
    assert (first.place, first.group) == ("moments", "head") and first.statistic.startswith("exp_avg_sq")
    assert first.ratio > 1e3  # orders of magnitude, not a borderline 10×
    # Adam's step is scale-invariant: the weights, loss and golden gradients did not jump, the body was untouched.
    assert {r.place for r in changes} == {"moments"} and {r.group for r in changes} == {"head"}
    # The batch is the golden one: the data stages match the golden, the model's first output does not.
    assert all(p.vs_golden == "hidden" for p in res.probes)
    finding = next(f for f in bisect_findings(res, changes) if f.id == "bisect.first_bad_checkpoint")
    assert finding.severity.value == "error" and finding.stage == "optimizer"
    assert "ckpt-013.pt" in finding.message and "'head'" in finding.message and "exp_avg_sq" in finding.message
    table = {row["group"]: row for row in finding.evidence["groups"]}
    assert table["head"]["first_unhealthy"]["exp_avg_sq.max"] > 1e3 * table["head"]["last_healthy"]["exp_avg_sq.max"]
    assert finding.evidence["runs"] == res.runs and len(finding.evidence["probes"]) == res.runs
    json.dumps(finding.to_dict(), allow_nan=False)


def test_a_stored_lr_spike_is_named_as_the_lr_before_the_weights_it_moved(tmp_path):
    train(tmp_path, kind="lr")
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.checkpoints[res.first_unhealthy] == "ckpt-013.pt"
    changes = judge_change(res.pair, res.factor)
    assert (changes[0].place, changes[0].group, changes[0].statistic) == ("lr", "head", "lr")
    assert "weights" in {r.place for r in changes}  # the jump it caused comes after it, in causal order
    finding = next(f for f in bisect_findings(res, changes) if f.id == "bisect.first_bad_checkpoint")
    assert finding.stage == "optimizer" and "'head' lr 10 against 0.01" in finding.message


def test_a_healthy_bad_end_is_flaky_and_not_bisected(tmp_path):
    train(tmp_path, spike_at=None)
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.status == "flaky_bad" and res.runs == 2 and res.pair is None
    ids = [f.id for f in bisect_findings(res)]
    assert ids == ["bisect.flaky"]


def test_an_unhealthy_good_end_is_flaky(tmp_path):
    paths = train(tmp_path, steps=4, spike_at=None)
    ckpt = torch.load(paths[0], weights_only=True)
    ckpt["model"]["head.weight"][0, 0] = float("nan")
    torch.save(ckpt, paths[0])
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.status == "flaky_good" and res.runs == 1
    (flaky,) = bisect_findings(res)
    assert flaky.id == "bisect.flaky" and "ckpt-000.pt" in flaky.message and "not finite" in flaky.message


def test_a_corrupt_file_and_a_pickle_payload_are_skipped_and_said(tmp_path):
    paths = train(tmp_path)
    paths[9].write_bytes(b"PK\x03\x04 this is not a checkpoint" * 10)  # the first midpoint probed
    ckpt = torch.load(paths[19], weights_only=True)
    torch.save({**ckpt, "config": Payload()}, paths[19])  # the claimed bad end
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert UNPICKLED == []
    assert res.status == "found" and res.checkpoints[res.first_unhealthy] == "ckpt-013.pt"
    skipped = {p.name: p.skip_reason for p in res.skipped}
    assert set(skipped) == {"ckpt-009.pt", "ckpt-019.pt"}
    assert "weights_only=True" in skipped["ckpt-019.pt"]
    said = [f for f in bisect_findings(res) if f.id == "bisect.skipped"]
    assert {f.evidence["checkpoint"] for f in said} == set(skipped) and all(f.severity.value == "info" for f in said)


def test_a_pickle_payload_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "extra": Payload()}, path)
    (ckpt,) = find_checkpoints(str(tmp_path))
    with pytest.raises(CheckpointLoadError, match=r"evil\.pt: refused by torch\.load\(weights_only=True\)"):
        load_checkpoint_file(ckpt)
    assert UNPICKLED == []


def _safetensors_saver(folder, k, model, opt):
    path = folder / f"weights-{k}.safetensors"
    save_file({n: t.contiguous() for n, t in model.state_dict().items()}, str(path), metadata={"step": str(k)})
    return path


def test_a_safetensors_set_loads_in_step_order_and_says_the_optimizer_state_is_absent(tmp_path):
    train(tmp_path, steps=11, spike_at=None, save=_safetensors_saver)
    files = find_checkpoints(str(tmp_path))
    assert [f.step for f in files] == list(range(11))  # 2 before 10: by stored step, not by name
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.status == "flaky_bad" and all(not p.has_optimizer_state for p in res.probes)
    absent = next(f for f in bisect_findings(res) if f.id == "bisect.optimizer_state_absent")
    assert absent.severity.value == "info"


def _hf_saver(folder, k, model, opt):
    d = folder / f"checkpoint-{k}"
    d.mkdir()
    save_file({n: t.contiguous() for n, t in model.state_dict().items()}, str(d / "model.safetensors"))
    torch.save(opt.state_dict(), d / "optimizer.pt")
    torch.save(torch.optim.lr_scheduler.StepLR(opt, 5).state_dict(), d / "scheduler.pt")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": k, "log_history": []}))
    return d


def test_hf_trainer_checkpoint_folders_load_with_their_optimizer_state(tmp_path):
    train(tmp_path, steps=20, save=_hf_saver)
    torch.save({"args": Payload()}, tmp_path / "training_args.bin")  # a Trainer's output_dir holds these too
    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))  # (the final export)
    files = find_checkpoints(str(tmp_path))
    assert [f.name for f in files[:3]] == ["checkpoint-0", "checkpoint-1", "checkpoint-2"] and files[-1].step == 19
    assert load_checkpoint_file(files[5]).optimizer_state is not None
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.status == "found" and res.checkpoints[res.first_unhealthy] == "checkpoint-13"
    assert all(p.has_optimizer_state and p.source == "hf-dir" for p in res.probes)


@pytest.mark.parametrize("layout", ["model_state_dict", "lightning", "bare"])
def test_dict_layouts_load_into_the_pipelines_model(tmp_path, layout):
    pipe = TwoGroupPipeline()
    model = pipe.build_model(1)
    opt = pipe.build_optimizer(model)
    sd, osd = model.state_dict(), opt.state_dict()
    obj = {"model_state_dict": {"model_state_dict": sd, "optimizer_state_dict": osd, "global_step": 7},
           "lightning": {"state_dict": {f"model.{k}": v for k, v in sd.items()}, "optimizer_states": [osd],
                         "lr_schedulers": [{"last_epoch": 7}], "global_step": 7},
           "bare": dict(sd)}[layout]
    torch.save(obj, tmp_path / "c-7.ckpt")
    (ckpt,) = find_checkpoints(str(tmp_path / "*.ckpt"))
    assert ckpt.step == 7
    loaded = load_into(pipe, ckpt, seed=0)
    assert torch.equal(loaded.model.state_dict()["head.weight"], sd["head.weight"])
    assert loaded.has_optimizer_state == (layout != "bare")


class OwnLoader(TwoGroupPipeline):
    """A pipeline that loads its own checkpoints (the `load_checkpoint` capability)."""

    def __init__(self):
        self.calls: list[str] = []

    def load_checkpoint(self, path):
        self.calls.append(path)
        ckpt = torch.load(path, weights_only=True)
        model = self.build_model(0)
        model.load_state_dict(ckpt["model"])
        opt = self.build_optimizer(model)
        opt.load_state_dict(ckpt["optimizer"])
        return {"model": model, "optimizer": opt, "step": ckpt["step"]}


def test_the_pipelines_load_checkpoint_takes_precedence(spiked):
    pipe = OwnLoader()
    res = _bisect(pipe, spiked)
    assert res.checkpoints[res.first_unhealthy] == "ckpt-013.pt"
    assert len(pipe.calls) >= res.runs and all(p.source == "load_checkpoint" for p in res.probes)


def test_a_nan_in_adams_state_from_step_7_on_is_named_there(tmp_path):
    paths = train(tmp_path, spike_at=None)
    for path in paths[7:]:  # a corrupted state carried forward by every later save
        ckpt = torch.load(path, weights_only=True)
        head_bias = ckpt["optimizer"]["param_groups"][1]["params"][-1]
        ckpt["optimizer"]["state"][head_bias]["exp_avg_sq"][0] = float("nan")
        torch.save(ckpt, path)
    res = _bisect(TwoGroupPipeline(), tmp_path)
    assert res.checkpoints[res.first_unhealthy] == "ckpt-007.pt"
    first = judge_change(res.pair)[0]
    assert (first.place, first.group) == ("moments", "head") and first.statistic.startswith("exp_avg_sq")
    finding = next(f for f in bisect_findings(res) if f.id == "bisect.first_bad_checkpoint")
    json.dumps(finding.to_dict(), allow_nan=False)


@pytest.mark.parametrize("weights", ["sharded-safetensors", "pytorch_model.bin"])
def test_hf_folders_with_sharded_or_bin_weights_load(tmp_path, weights):
    pipe = TwoGroupPipeline()
    sd = pipe.build_model(3).state_dict()
    d = tmp_path / "checkpoint-5"
    d.mkdir()
    if weights == "pytorch_model.bin":
        torch.save(sd, d / "pytorch_model.bin")
    else:
        names = sorted(sd)
        shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
        for shard, keys in shards.items():
            save_file({k: sd[k].contiguous() for k in keys}, str(d / shard))
        index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
        (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (ckpt,) = find_checkpoints(str(tmp_path / "checkpoint-*"))
    loaded = load_into(pipe, ckpt, seed=0)
    assert ckpt.step == 5 and not loaded.has_optimizer_state
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in sd.items())


def test_a_fifo_named_like_a_checkpoint_is_refused_without_blocking(tmp_path):
    import os

    os.mkfifo(tmp_path / "ckpt-005.pt")
    (ckpt,) = find_checkpoints(str(tmp_path))
    assert ckpt.step == 5  # from the name: nothing was opened
    with pytest.raises(CheckpointLoadError, match=r"ckpt-005\.pt: a FIFO"):
        load_checkpoint_file(ckpt)


def test_group_grads_reads_each_groups_norm_at_the_step_and_unhooks():
    from signalchain.probes.group_grads import GroupGrads

    pipe = TwoGroupPipeline()
    model = pipe.build_model(0)
    opt = pipe.build_optimizer(model)
    loss = pipe.step(model, pipe.golden_batch(0), lambda stage, value, **meta: value).loss
    loss.backward()
    expected = [torch.cat([q.grad.flatten() for q in g["params"]]).norm().item() for g in opt.param_groups]
    with GroupGrads(opt).attached_to() as probe:
        opt.step()
        opt.step()  # a second step in the same update: the first is kept
    assert probe.norms == pytest.approx(expected, rel=1e-6) and not opt._optimizer_step_pre_hooks


class StrictPipeline(TwoGroupPipeline):
    """A pipeline whose step refuses non-finite logits (an assertion many training loops have)."""

    def step(self, model, batch, tap):
        out = super().step(model, batch, tap)
        if not torch.isfinite(out.logits).all():
            raise FloatingPointError("non-finite logits")
        return out


def test_a_step_that_raises_at_a_checkpoint_makes_it_unhealthy_not_a_crash(tmp_path):
    paths = train(tmp_path, spike_at=None)
    for path in paths[11:]:
        ckpt = torch.load(path, weights_only=True)
        ckpt["model"]["head.weight"][3, 3] = float("inf")
        torch.save(ckpt, path)
    res = _bisect(StrictPipeline(), tmp_path)
    assert res.checkpoints[res.first_unhealthy] == "ckpt-011.pt"
    assert "FloatingPointError" in (res.pair.b.error or "")
    finding = next(f for f in bisect_findings(res) if f.id == "bisect.first_bad_checkpoint")
    assert finding.stage == "model" and "weight_finite" in finding.message  # the weights come before the loss


def test_a_step_range_keeps_its_ends_and_drops_the_unnumbered(tmp_path):
    files = [CheckpointFile(tmp_path / n, "torch", s) for n, s in (("a", 10), ("b", 20), ("c", 30), ("last", None))]
    assert [f.step for f in in_step_range(files, 10, 20)] == [10, 20]
    assert [f.step for f in in_step_range(files, None, 20)] == [10, 20]
    assert [f.step for f in in_step_range(files, 20, None)] == [20, 30]
    assert [f.step for f in in_step_range(files, None, None)] == [10, 20, 30]  # a step-less file is never in a range
