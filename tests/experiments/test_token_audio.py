"""Tokens against the audio they were made from, on the reference: its codec resolves the clips, so
fresh tokens are silent and stale or reordered ones are found, each on the codec's own baseline."""

import pytest

from signalchain.checks.token_audio import judge_token_audio
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.data import measure_token_audio
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline


def judged(p, seed=0):
    m = measure_token_audio(Context(ProtocolView(p), seed=seed, budget=BUDGETS["economy"]))
    return m, [(f.id, f.severity.value) for f in judge_token_audio(m)]


def test_fresh_tokens_of_the_reference_codec_are_silent():
    m, found = judged(ReferencePipeline())
    assert found == []
    assert m["sims"] and len(m["sims"]) == len(m["own"])


@pytest.mark.parametrize("fault,expected", [("stale_token_cache", "loader.stale_cache"),
                                            ("codebooks_swapped", "tokens.codebook_order")])
def test_stale_and_reordered_tokens_are_found(fault, expected):
    _, found = judged(ReferencePipeline().with_faults([fault]))
    assert found == [(expected, "error")]
