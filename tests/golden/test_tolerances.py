"""Per-dtype tolerances, their resolution per stage, and tolerances suggested from repeated runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from signalchain import Tolerance, UsageError, compare_traces, record, tap
from signalchain.golden import (
    EXACT,
    dtype_tolerance,
    resolve_tolerances,
    stage_tolerances,
    suggest_tolerances,
)
from signalchain.golden.tolerances import DTYPE_TOLERANCES


def trace_of(**stages):
    with record(values=True) as t:
        for name, value in stages.items():
            tap(name.replace("__", "."), value)
    return t


def base(noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
    return dict(caption=["a", "b"], tokens=np.arange(8).reshape(2, 4), mask__loss=np.ones((2, 4), dtype=bool),
                logits=logits + (noise * rng.standard_normal(logits.shape)).astype(np.float32),
                half=torch.linspace(0.5, 2.0, 32, dtype=torch.float16), loss=torch.tensor(2.5))


def test_defaults_are_torch_testing_assert_close_ones():
    from torch.testing._comparison import _DTYPE_PRECISIONS  # the reference the defaults follow

    for dtype, (rtol, atol) in _DTYPE_PRECISIONS.items():
        name = str(dtype).removeprefix("torch.")
        if name in DTYPE_TOLERANCES:
            assert dtype_tolerance(name) == Tolerance(rtol, atol), name
    for name in ("float16", "bfloat16", "float32", "float64", "complex64", "complex128"):
        assert name in DTYPE_TOLERANCES
    assert dtype_tolerance("torch.float16") == Tolerance(1e-3, 1e-5)
    assert dtype_tolerance("float") == Tolerance(1e-7, 1e-7)  # a Python float is a double


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool", "str", "list", "float8_e4m3fn"])
def test_other_dtypes_are_exact(dtype):
    assert dtype_tolerance(dtype) == EXACT


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("rel", [3e-7, 5e-4, 5e-3, 5e-2])
def test_compare_agrees_with_assert_close(dtype, rel):
    golden = torch.linspace(0.5, 2.0, 64, dtype=dtype)
    new = golden * (1 + rel)  # computed in the stage's own dtype, as a changed pipeline would
    try:
        torch.testing.assert_close(new, golden)
        expected = True
    except AssertionError:
        expected = False
    a, b = trace_of(x=golden), trace_of(x=new)
    assert compare_traces(a, b, per_stage=stage_tolerances(a)).identical is expected


def test_resolution_order_and_sources():
    t = trace_of(**base())
    resolved = resolve_tolerances(t)
    assert resolved["logits"] == (Tolerance(1.3e-6, 1e-5), "float32 default")
    assert resolved["half"] == (Tolerance(1e-3, 1e-5), "float16 default")
    assert resolved["tokens"] == (EXACT, "exact (int64)")
    assert resolved["caption"][0] == EXACT and resolved["mask.loss"][0] == EXACT
    r = resolve_tolerances(t, {"logits": (1e-2, 1e-3)}, default=Tolerance(1e-4, 1e-4),
                           suggested={"logits": Tolerance(5e-3, 5e-3), "half": Tolerance(2e-3, 2e-5)})
    assert r["logits"] == (Tolerance(1e-2, 1e-3), "per_stage")
    assert r["half"] == (Tolerance(2e-3, 2e-5), "suggested")
    assert r["loss"] == (Tolerance(1e-4, 1e-4), "tol=")
    assert r["tokens"][0] == EXACT  # a global tolerance never loosens an exact stage
    assert stage_tolerances(t, default=(1e-4, 1e-4))["logits"] == Tolerance(1e-4, 1e-4)


def test_bad_overrides_are_refused():
    t = trace_of(**base())
    with pytest.raises(UsageError, match=r"per_stage for stage 'logit', which the golden does not have; its stages"):
        resolve_tolerances(t, {"logit": (1e-3, 1e-5)})
    with pytest.raises(UsageError, match=r"stage 'tokens', which is tensor of int64 and is compared exactly"):
        resolve_tolerances(t, {"tokens": (1e-3, 1e-5)})
    with pytest.raises(UsageError, match=r"per_stage\['logits'\]: 0.001 is not a tolerance; give Tolerance"):
        resolve_tolerances(t, {"logits": 1e-3})
    with pytest.raises(UsageError, match=r"rtol -1 is not a tolerance"):
        resolve_tolerances(t, default=(-1, 0))


def test_suggest_on_deterministic_runs_gives_the_defaults():
    runs = [trace_of(**base()) for _ in range(3)]
    assert suggest_tolerances(runs) == {"logits": dtype_tolerance("float32"), "half": dtype_tolerance("float16"),
                                        "loss": dtype_tolerance("float32")}


def test_suggest_covers_the_spread_times_the_margin():
    runs = [trace_of(**base(noise=1e-4 * (i > 0), seed=i)) for i in range(4)]
    suggested = suggest_tolerances(runs, margin=3.0)
    default = dtype_tolerance("float32")
    ref = runs[0]["logits"].value.astype(np.float64)
    worst = max(float(np.max(np.abs(r["logits"].value - ref) / (default.atol + default.rtol * np.abs(ref))))
                for r in runs[1:])
    assert worst > 1  # the noise is beyond the default, so the default would fail
    assert suggested["logits"].atol == pytest.approx(default.atol * 3.0 * worst)
    assert suggested["logits"].rtol == pytest.approx(default.rtol * 3.0 * worst)
    assert suggested["half"] == dtype_tolerance("float16")  # never below the default
    loose = stage_tolerances(runs[0], suggested=suggested)
    for run in runs[1:]:
        assert compare_traces(runs[0], run, per_stage=loose).identical
        assert not compare_traces(runs[0], run, per_stage=stage_tolerances(runs[0])).identical


def test_suggest_refuses_what_no_tolerance_covers():
    a = base()
    b = dict(a, tokens=a["tokens"] + 1)
    with pytest.raises(UsageError, match=r"not reproducible at stage\(s\) tokens"):
        suggest_tolerances([trace_of(**a), trace_of(**b)])
    nan = dict(a, logits=np.where(np.arange(64).reshape(4, 16) == 3, np.nan, a["logits"]).astype(np.float32))
    with pytest.raises(UsageError, match=r"not reproducible at stage\(s\) logits"):
        suggest_tolerances([trace_of(**a), trace_of(**nan)])
    with pytest.raises(UsageError, match="needs at least 2 runs"):
        suggest_tolerances([trace_of(**a)])
    with pytest.raises(UsageError, match="margin 0.5 is not a safety margin"):
        suggest_tolerances([trace_of(**a), trace_of(**a)], margin=0.5)
    fewer = {k: v for k, v in a.items() if k != "half"}
    with pytest.raises(UsageError, match="the runs must tap the same stages"):
        suggest_tolerances([trace_of(**a), trace_of(**fewer)])
    reshaped = dict(a, logits=a["logits"].reshape(16, 4))
    with pytest.raises(UsageError, match=r"stage 'logits' is tensor float32 \[4, 16\] in run 0 but"):
        suggest_tolerances([trace_of(**a), trace_of(**reshaped)])
