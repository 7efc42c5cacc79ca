"""Guidance without condition dropout on a second convention (issue 41): the HF MusicGen adapter,
whose generate reports the `guidance_scale` it applies and whose training drops captions at
`cond_dropout`; the real-bug bed proves it on the AudioCraft-style reference."""

import pytest

pytest.importorskip("transformers")

from signalchain.checks.conditioning import judge_guidance_dropout  # noqa: E402
from signalchain.experiments.conditioning import measure_condition_data, measure_declared_guidance  # noqa: E402
from signalchain.experiments.context import BUDGETS, Context  # noqa: E402
from signalchain.pipeline import ProtocolView  # noqa: E402


def _judged(cond_dropout, guidance_scale):
    from signalchain.integrations.hf_musicgen import HFMusicgenPipeline, examples_from_clips
    from signalchain.reference.hf.tiny import bed_clips, tiny_model, tiny_tokenizer

    p = HFMusicgenPipeline(tiny_model, tokenizer=tiny_tokenizer(), data=examples_from_clips(bed_clips(8)),
                           segment_seconds=0.5, batch_size=4, cond_dropout=cond_dropout,
                           guidance_scale=guidance_scale)
    ctx = Context(ProtocolView(p), seed=0, budget=BUDGETS["economy"])
    declared, data = measure_declared_guidance(ctx), measure_condition_data(ctx)
    return declared, data, [f.id for f in judge_guidance_dropout(declared, data)]


def test_guidance_with_no_condition_dropped_is_named_on_hf_musicgen():
    declared, data, ids = _judged(0.0, 3.0)
    assert declared.cfg_coef == 3.0 and {b.rate for b in data.batches} == {0.0}  # the rate the adapter taps
    assert ids == ["generation.guidance_untrained"]


@pytest.mark.parametrize("cond_dropout, guidance_scale", [(0.1, 3.0), (0.0, 1.0)])
def test_dropout_or_no_guidance_is_silent(cond_dropout, guidance_scale):
    declared, _, ids = _judged(cond_dropout, guidance_scale)
    assert declared.cfg_coef == guidance_scale and ids == []
