"""`trace.redirect(fn)`: every global tap goes to fn while it is open, and nothing is recorded."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain._tensor import as_float
from signalchain.trace import record, recording, redirect, tap


def test_redirect_hands_every_tap_to_fn_and_restores_the_recording() -> None:
    seen: list[tuple[str, object, dict]] = []
    with record() as trace:
        tap("before", 1.0)
        with redirect(lambda stage, value, /, **meta: seen.append((stage, value, meta))):
            out = tap("loss", 2.5, sample_rate=16000)
        tap("after", 3.0)
    assert out == 2.5  # the global tap still returns its value
    assert seen == [("loss", 2.5, {"sample_rate": 16000})]
    assert trace.names() == ["before", "after"]  # the redirected tap was not recorded
    assert recording() is None


def test_redirect_closes_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError):
        with redirect(lambda stage, value, /, **meta: None):
            raise RuntimeError("boom")
    assert recording() is None


def test_as_float_reads_tensors_numbers_and_gives_the_default_for_the_rest() -> None:
    torch = pytest.importorskip("torch")
    t = torch.tensor(1.5, requires_grad=True) * 2
    assert as_float(t) == 3.0
    assert as_float(torch.tensor(0.25, dtype=torch.bfloat16)) == 0.25
    assert as_float(np.float32(0.5)) == 0.5 and as_float(2) == 2.0
    assert as_float(None, None) is None
    assert as_float(torch.ones(3), None) is None
    with pytest.raises(TypeError):
        as_float(None)
