"""Codec-token judges read a symbolic step ([B, T] ids, [B, T, V] logits) as one stream, and stay
silent on a clean one."""

import numpy as np
import pytest

pytest.importorskip("miditok")

from _symbolic import clean_pieces, encode, token_meta, tokenizer  # noqa: E402
from signalchain import record, tap  # noqa: E402
from signalchain.checks.data import DATA_CHECKS  # noqa: E402
from signalchain.checks.tokens import TOKEN_CHECKS  # noqa: E402
from signalchain.trace.layout import read_layout  # noqa: E402


def step_trace(mask_all=False, kind="symbolic"):
    tok = tokenizer()
    meta = {**token_meta(tok), "kind": kind}
    ids = [encode(tok, p) for p in clean_pieces(0)]
    tokens = np.full((4, 160), meta["pad_id"], np.int64)
    for i, x in enumerate(ids):
        tokens[i, :min(160, len(x))] = x[:160]
    targets = tokens[:, 1:].copy()
    mask = (targets != meta["pad_id"]) & (not mask_all)
    targets[~mask] = -100
    v = meta["cardinality"]
    with record(values=True) as t:
        tap("tokens", tokens, **meta)
        tap("caption", ["a piece"] * 4)
        tap("targets", targets)
        tap("mask.loss", mask)
        tap("logits", np.random.default_rng(0).normal(0, 0.01, (4, 159, v)).astype(np.float32))
        tap("loss", float(np.log(v)))
    return t


def findings(t):
    return [(f.id, f.stage) for j in (*DATA_CHECKS, *TOKEN_CHECKS) for f in j(t)]


def test_a_clean_symbolic_step_is_silent():
    t = step_trace()
    assert findings(t) == []
    view = read_layout(t)
    assert view.codebooks == 1 and view.targets.shape == (4, 1, 159) and view.logits_shape[:3] == (4, 1, 159)


def test_an_empty_loss_mask_still_fires_on_symbolic_tokens():
    assert ("mask.empty", "mask.loss") in findings(step_trace(mask_all=True))


def test_octuple_like_symbolic_ids_are_not_codebooks():
    ids = np.zeros((2, 30, 5), np.int64)  # [B, T, F]: one token per field per step, mostly one value
    with record(values=True) as t:
        tap("tokens", ids, kind="symbolic", tokenizer="Octuple", cardinality=3)
    assert findings(t) == [] and read_layout(t).tokens is None
