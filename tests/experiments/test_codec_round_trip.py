"""The codec round trip on a second convention (issue 41): a hand-written HF MusicGen pipeline
whose decode forgets EnCodec's per-chunk scale (what `audio_scales` undoes when the codec
normalises), beside its clean twin, and the reference pipeline's fitted codec."""

import sys
from pathlib import Path

import pytest

from signalchain.checks.output import judge_decoder
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.output import probe_decoder
from signalchain.pipeline import ProtocolView
from signalchain.reference import ReferencePipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
from hf_user_pipeline import HFUserPipeline  # noqa: E402


class ScaleDropped(HFUserPipeline):
    """decode returns the codec's output at its normalised level: 1/1000 of what was encoded."""

    def decode(self, tokens, model):
        return super().decode(tokens, model) * 1e-3


def _probe(p):
    return probe_decoder(Context(ProtocolView(p), seed=0, budget=BUDGETS["economy"]))


@pytest.mark.parametrize("pipeline, fires", [(ScaleDropped, True), (HFUserPipeline, False), (ReferencePipeline, False)])
def test_the_round_trip_level_is_judged_on_hf_and_reference_codecs(pipeline, fires):
    probe = _probe(pipeline())
    assert probe.round_trip_stage == "audio.cropped" and probe.round_trip_db
    ids = [f.id for f in judge_decoder(probe)]
    assert ("codec.round_trip" in ids) == fires
    if fires:
        assert all(g < -50 for g in probe.round_trip_db)
