import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _strategies import json_values as json_values_of
from signalchain import Finding, Severity, SignalchainError
from signalchain.findings import check_failed, exit_code, jsonable, sort_findings

json_values = json_values_of(ints=10**9, text=20, keys=8, items=4, leaves=12)


def test_round_trip_keeps_every_field():
    f = Finding("mask.empty", "error", "mask.loss", "loss mask keeps 0 of 4096 target positions",
                {"valid": 0, "total": 4096}, "check the padding mask", "checks.data")
    back = Finding.from_json(f.to_json())
    assert back == f
    assert back.severity is Severity.ERROR
    assert json.loads(f.to_json())["severity"] == "error"


@given(st.text(min_size=1, max_size=30), st.sampled_from(list(Severity)), st.none() | st.text(max_size=20),
       st.dictionaries(st.text(max_size=10), json_values, max_size=5))
def test_round_trip_property(fid, sev, stage, evidence):
    f = Finding(fid, sev, stage, "m", evidence)
    assert Finding.from_dict(json.loads(f.to_json())) == f


def test_evidence_becomes_strict_json():
    f = Finding("x", "warning", None, "m", {"a": float("nan"), "b": np.float32(1.5), "c": np.arange(3),
                                             "d": (1, float("-inf")), "e": np.int64(7)})
    assert f.evidence == {"a": "nan", "b": 1.5, "c": [0, 1, 2], "d": [1, "-inf"], "e": 7}
    json.loads(f.to_json())  # allow_nan=False would have raised


def test_jsonable_of_torch_scalar():
    import torch

    assert jsonable(torch.tensor(2.5)) == 2.5
    assert jsonable({"t": torch.tensor([1, 2])}) == {"t": [1, 2]}
    assert jsonable(math.inf) == "inf"


def test_unknown_severity_is_refused_with_the_allowed_values():
    with pytest.raises(SignalchainError, match="unknown severity 'fatal'; allowed: 'error', 'warning', 'info'"):
        Finding("x", "fatal", None, "m")


def test_from_dict_names_missing_fields():
    with pytest.raises(SignalchainError, match=r"lacks \['severity'\]"):
        Finding.from_dict({"id": "x", "message": "m"})


def test_exit_code_and_order():
    info = Finding("a", "info", None, "m")
    warn = Finding("b", "warning", None, "m")
    err = Finding("c", "error", None, "m")
    assert exit_code([info, warn]) == 0
    assert exit_code([info, err]) == 1
    assert [f.id for f in sort_findings([info, warn, err])] == ["c", "b", "a"]


def test_check_failed_carries_the_traceback():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        f = check_failed("checks.data", exc, stage="tokens")
    assert f.id == "internal.check_failed" and f.severity is Severity.WARNING  # ours, not the run's (DESIGN §4)
    assert "boom" in f.message and "ValueError" in f.evidence["traceback"]
    assert "please report" in f.hint
    assert exit_code([f]) == 0  # our crash never changes the exit code
