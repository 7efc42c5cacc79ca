"""Symbolic ids `[B, T]` (`kind="symbolic"`) read as one token stream: shapes and alignment are judged."""

import numpy as np

from _traces import make_trace
from signalchain.checks.data import judge_shapes, judge_targets
from signalchain.trace.layout import read_layout


def symbolic_step(shift: int, declared: int | None):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 40, size=(4, 30)).astype(np.int64)
    targets = np.full_like(ids, -100)
    targets[:, : ids.shape[1] - shift] = ids[:, shift:]
    meta = {"ignore_index": -100} | ({"shift": declared} if declared is not None else {})
    return make_trace(("tokens", ids, {"kind": "symbolic", "cardinality": 40}), ("targets", targets, meta),
                      ("mask.loss", targets != -100), ("logits", rng.normal(size=(4, 30, 40)).astype(np.float32)))


def test_symbolic_ids_are_one_stream():
    v = read_layout(symbolic_step(1, 1))
    assert v.tokens.shape == (4, 1, 30) and v.codebooks == 1 and v.problems == []
    assert v.orders == {"logits": "(BK)TV", "targets": "(BK)T", "mask.loss": "(BK)T"}
    assert v.logits_shape == (4, 1, 30, 40)


def test_next_token_targets_declared_shift_1_are_silent():
    t = symbolic_step(1, 1)
    assert judge_shapes(t) == [] and judge_targets(t) == []


def test_a_wrong_shift_is_misaligned():
    assert [f.id for f in judge_targets(symbolic_step(2, 1))] == ["targets.misaligned"]
    assert [f.id for f in judge_targets(symbolic_step(0, 1))] == ["targets.misaligned"]
    assert [f.id for f in judge_targets(symbolic_step(2, None))] == ["targets.misaligned"]


def test_an_undeclared_next_token_shift_is_no_error():
    # targets[t] = ids[t + 1] with nothing saying what the model reads: the next-token convention of
    # every text-style LM, or an off-by-one on logits already aligned with the ids. Said, not judged.
    found = judge_targets(symbolic_step(1, None))
    assert [(f.id, f.severity.value) for f in found] == [("tap.ambiguous", "info")]
    # What the model reads, tapped, settles it: the ids themselves, one step behind the targets.
    t = symbolic_step(1, None)
    tapped = make_trace(*[(r.name, r.value, dict(r.meta)) for r in t], ("tokens.input", np.asarray(t.value("tokens"))))
    assert judge_targets(tapped) == []
