import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signalchain import Tolerance, compare_traces, record, tap


def trace_of(**stages):
    with record(values=True) as t:
        for name, value in stages.items():
            tap(name.replace("__", "."), value, **({"sample_rate": 8000} if name.startswith("audio") else {}))
    return t


def base():
    rng = np.random.default_rng(0)
    return dict(audio__original=rng.normal(size=(2, 1, 100)).astype(np.float32) * 0.1,
                caption=["a", "b"], metadata=[{"k": 1}, {"k": 2}],
                crop=np.array([[0, 50], [10, 60]]), tokens=rng.integers(0, 16, size=(2, 4, 10)),
                mask__loss=np.ones((2, 4, 10), dtype=bool), logits=rng.normal(size=(2, 4, 10, 16)).astype(np.float32),
                loss=2.5)


def test_identical_traces():
    c = compare_traces(trace_of(**base()), trace_of(**base()))
    assert c.identical and c.first_divergence is None and c.downstream == []
    d = c.to_dict()
    assert d["identical"] is True and d["first_divergence"] is None and len(d["stages"]) == 8


@pytest.mark.parametrize("stage,change", [
    ("crop", lambda v: v + 1),
    ("tokens", lambda v: np.where(np.arange(v.size).reshape(v.shape) == 5, (v + 1) % 16, v)),
    ("mask__loss", lambda v: np.concatenate([v[..., :-1], np.zeros_like(v[..., -1:])], axis=-1)),
    ("caption", lambda v: ["a", "c"]),
    ("metadata", lambda v: [{"k": 1}, {"k": 3}]),
    ("loss", lambda v: v + 0.1),
])
def test_first_divergence_is_the_changed_stage(stage, change):
    b = base()
    b[stage] = change(b[stage])
    c = compare_traces(trace_of(**base()), trace_of(**b))
    assert not c.identical
    assert c.first_divergence.stage == stage.replace("__", ".")
    assert c.downstream == []


def test_downstream_lists_later_failures():
    b = base()
    b["crop"] = b["crop"] + 1
    b["logits"] = b["logits"] * 2
    c = compare_traces(trace_of(**base()), trace_of(**b))
    assert c.first_divergence.stage == "crop" and c.downstream == ["logits"]
    assert c.to_dict()["first_divergence"]["kind"] == "tensor"


def test_float_tolerance_and_per_stage_override():
    b = base()
    b["logits"] = b["logits"] + 1e-4
    c = compare_traces(trace_of(**base()), trace_of(**b))
    assert c.first_divergence.stage == "logits"
    detail = c.first_divergence.detail
    assert detail["max_abs_diff"] == pytest.approx(1e-4, rel=0.05)
    c2 = compare_traces(trace_of(**base()), trace_of(**b), per_stage={"logits": Tolerance(0, 1e-3)})
    assert c2.identical


def test_audio_reports_snr():
    b = base()
    b["audio__original"] = b["audio__original"] * 1.1
    d = compare_traces(trace_of(**base()), trace_of(**b)).first_divergence
    assert d.stage == "audio.original"
    assert d.detail["snr_db"] == pytest.approx(20.0, abs=0.01)  # 10·log10(1 / 0.1²)


def test_nan_at_the_same_place_is_equal_but_a_new_nan_is_not():
    a = base()
    a["logits"] = a["logits"].copy()
    a["logits"][0, 0, 0, 0] = np.nan
    assert compare_traces(trace_of(**a), trace_of(**a)).identical
    b = dict(a)
    b["logits"] = a["logits"].copy()
    b["logits"][1, 0, 0, 0] = np.nan
    d = compare_traces(trace_of(**a), trace_of(**b)).first_divergence
    assert d.stage == "logits" and d.detail["nonfinite_new"] == 2


def test_shape_dtype_and_missing_or_new_stages():
    b = base()
    b["tokens"] = b["tokens"][:, :, :5]
    assert compare_traces(trace_of(**base()), trace_of(**b)).first_divergence.detail["reason"] == "shape changed"
    b = base()
    b["tokens"] = b["tokens"].astype(np.int32)
    assert compare_traces(trace_of(**base()), trace_of(**b)).first_divergence.detail["reason"] == "dtype changed"
    b = base()
    del b["crop"]
    d = compare_traces(trace_of(**base()), trace_of(**b)).first_divergence
    assert d.stage == "crop" and "missing" in d.detail["reason"]
    extra = {}
    for k, v in base().items():
        extra[k] = v
        if k == "metadata":
            extra["audio__resampled"] = np.zeros((2, 1, 10), dtype=np.float32)
    c = compare_traces(trace_of(**base()), trace_of(**extra))
    assert c.first_divergence.stage == "audio.resampled" and "new" in c.first_divergence.detail["reason"]
    assert [s.stage for s in c.stages].index("audio.resampled") == 3


def test_summary_only_traces_compare_by_hash_and_statistics():
    def summary_trace(**stages):
        with record() as t:
            for name, value in stages.items():
                tap(name, value)
        return t

    rng = np.random.default_rng(1)
    toks = rng.integers(0, 16, size=(2, 10))
    x = rng.normal(size=100)
    assert compare_traces(summary_trace(tokens=toks, x=x), summary_trace(tokens=toks, x=x)).identical
    c = compare_traces(summary_trace(tokens=toks, x=x), summary_trace(tokens=toks + 1, x=x * 3))
    assert c.first_divergence.stage == "tokens" and c.downstream == ["x"]
    assert c.stages[1].detail["compared"] == "summary"


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["audio__original", "crop", "tokens", "logits", "mask__loss"]), st.integers(0, 10_000), st.data()
)
def test_perturbing_one_element_of_any_stage_blames_exactly_it(stage, where, data):
    b = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in base().items()}
    arr = b[stage]
    flat = arr.reshape(-1)
    i = where % flat.size
    if arr.dtype == bool:
        flat[i] = not flat[i]
    elif np.issubdtype(arr.dtype, np.integer):
        flat[i] = flat[i] + data.draw(st.integers(1, 5))
    else:
        flat[i] = flat[i] + data.draw(st.floats(0.01, 10.0))
    c = compare_traces(trace_of(**base()), trace_of(**b))
    assert c.first_divergence.stage == stage.replace("__", ".")
    assert c.first_divergence.detail["mismatches"] == 1
    assert c.first_divergence.detail["first_index"] == [int(j) for j in np.unravel_index(i, arr.shape)]


@pytest.mark.parametrize("rtol,atol", [(-1, 0), (float("nan"), 0), (0, float("inf")), (0, -1e-9), (True, 0), ("1", 0)])
def test_a_tolerance_must_be_finite_and_non_negative(rtol, atol):
    from signalchain import UsageError

    with pytest.raises(UsageError, match="is not a tolerance: give a finite number >= 0"):
        Tolerance(rtol, atol)


def test_a_per_stage_tolerance_for_an_unknown_stage_is_refused_naming_the_stages():
    from signalchain import UsageError

    with pytest.raises(
        UsageError, match=r"stage 'logit', which the golden does not have; its stages: audio\.original, caption"
    ):
        compare_traces(trace_of(**base()), trace_of(**base()), per_stage={"logit": Tolerance(1e-3, 0)})
