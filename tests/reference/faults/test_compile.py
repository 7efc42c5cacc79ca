"""The compile fault: a model compiled with dynamic=False fed a crop length drawn per batch compiles a
new graph on every step; the doctor's compile family finds it at audio.cropped through the protocol
alone, and stays quiet on the clean reference, compiled or not."""

from __future__ import annotations

import pytest
import torch

from signalchain.experiments.context import Budget
from signalchain.experiments.doctor import run_doctor
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import get_fault
from signalchain.reference.faults.compile import causal_attention

dynamo = pytest.importorskip("torch._dynamo")
torch.set_num_threads(1)

NAME = "compile_variable_crops"
CFG = RefConfig(batch_size=4, train_size=32, valid_size=8, segment_seconds=1.0, dim=32, heads=2, layers=1)
BUDGET = Budget("economy", compile_steps=6)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def _compile(p: ReferencePipeline, seed: int = 0) -> list:
    return run_doctor(ProtocolView(p), families=["compile"], seed=seed, budget=BUDGET).findings


def test_the_fault_is_registered_for_the_slow_symptom() -> None:
    f = get_fault(NAME)
    assert f.expected_ids == ("perf.recompile",) and f.expected_stage == "audio.cropped" and f.symptom == "slow"


def test_the_fault_draws_a_crop_length_per_batch_and_compiles_a_graph_per_step() -> None:
    """The symptom without a detector: dynamo's own graph count grows with the steps."""
    p = ReferencePipeline(CFG, [NAME])
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    lengths, graphs = [], []
    it = p.loader("train")
    seen: dict[str, tuple[int, ...]] = {}

    def tap(stage: str, value, /, **meta):
        seen[stage] = tuple(getattr(value, "shape", ()))
        return value

    for _ in range(4):
        p.train_step(model, opt, next(it), tap)
        lengths.append(seen["audio.cropped"][-1])
        graphs.append(dynamo.utils.counters["stats"]["unique_graphs"])
    assert len(set(lengths)) == 4 and all(n % p.codec.hop == 0 for n in lengths)
    assert graphs[-1] - graphs[0] == 3  # one new graph per step after the first


def test_the_doctor_finds_the_recompiles_at_the_cropped_audio() -> None:
    found = [f for f in _compile(ReferencePipeline(CFG, [NAME])) if f.id == "perf.recompile"]
    assert len(found) == 1 and found[0].stage == "audio.cropped" and found[0].severity.value == "warning"
    ev = found[0].evidence
    line = causal_attention.__code__.co_firstlineno
    assert ev["guard_kind"] == "shape" and ev["location"].endswith(f"reference/faults/compile.py:{line}")
    assert ev["compilations"] >= 4 and "size mismatch" in found[0].message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_clean_reference_is_not_compiled_and_says_so(seed: int) -> None:
    assert [(f.id, f.severity.value) for f in _compile(ReferencePipeline(CFG), seed)] == [("perf.not_compiled", "info")]


def test_a_compiled_reference_with_fixed_crops_is_silent() -> None:
    cfg = RefConfig(**{**CFG.to_dict(), "compile": "eager", "compile_dynamic": False})
    assert _compile(ReferencePipeline(cfg)) == []


def test_variable_crops_under_dynamos_default_recompile_once_and_are_silent() -> None:
    """The model compiled with automatic dynamic shapes: the length becomes symbolic after one recompile."""
    p = ReferencePipeline(RefConfig(**{**CFG.to_dict(), "compile": "eager"}))
    choose, hop = p.choose_crops, p.codec.hop

    def random_length_crops(lengths, segment, rng):
        return choose(lengths, hop * int(rng.integers(segment // hop // 2, segment // hop + 1)), rng)

    p.choose_crops = random_length_crops
    rec = run_doctor(ProtocolView(p), families=["compile"], budget=BUDGET)
    assert rec.findings == []
    rows = rec.metrics["compile.compilations"]["rows"]
    assert [r[0] for r in rows] == [0, 1]  # updates that compiled: the first, and the one that made it dynamic
