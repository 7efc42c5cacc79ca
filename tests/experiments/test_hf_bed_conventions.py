"""The detectors that assumed the reference's conventions, on the HF MusicGen bed (a loss computed
inside the model, a frozen Encodec, a random toy codec, library host reads): silent on the clean
bed, and still firing where the bed is broken."""

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from signalchain.checks.optimisation.gradients import judge_gradients  # noqa: E402
from signalchain.checks.performance import judge_performance  # noqa: E402
from signalchain.checks.token_audio import judge_token_audio  # noqa: E402
from signalchain.experiments.context import BUDGETS, Context  # noqa: E402
from signalchain.experiments.data import measure_token_audio  # noqa: E402
from signalchain.experiments.optimisation.gradients import measure_gradients  # noqa: E402
from signalchain.experiments.performance import host_read_counts  # noqa: E402
from signalchain.pipeline import ProtocolView  # noqa: E402
from signalchain.records.performance import PerfMeasurement  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def bed():
    from signalchain.reference.hf import HFBedPipeline

    return HFBedPipeline()


def ctx_of(p, seed=0):
    return Context(ProtocolView(p), seed=seed, budget=BUDGETS["economy"])


def loud(findings):
    return [(f.id, f.severity.value, f.message[:120]) for f in findings if f.severity.value != "info"]


def test_the_loss_inside_the_model_depends_on_the_output_and_the_frozen_codec_is_usual(bed):
    r = measure_gradients(ctx_of(bed))
    assert r.loss_depends_on_logits is True and r.depends_via == "graph"  # HF returns a reshaped sibling
    found = judge_gradients(r)
    assert loud(found) == []
    (codec,) = [f for f in found if f.id == "optim.param_frozen"]
    assert codec.evidence["role"] == "codec" and all(m.startswith("audio_encoder") for m in codec.evidence["modules"])


def test_a_frozen_decoder_is_still_a_warning(bed):
    from signalchain.reference.hf import HFBedPipeline

    class FrozenDecoder(HFBedPipeline):
        def build_model(self, seed):
            model = super().build_model(seed)
            model.decoder.requires_grad_(False)
            return model

    found = judge_gradients(measure_gradients(ctx_of(FrozenDecoder())))
    warned = [f for f in found if f.id == "optim.param_frozen" and f.severity.value == "warning"]
    assert warned and any(m.startswith("decoder") for m in warned[0].evidence["modules"])


def test_a_toy_codec_that_cannot_tell_clips_apart_is_not_judged_stale(bed):
    m = measure_token_audio(ctx_of(bed))
    found = judge_token_audio(m)
    assert [f.id for f in found] == ["tokens.audio_unjudged"] and found[0].severity.value == "info"


def test_encodecs_host_reads_are_the_librarys_not_the_pipelines(bed):
    c = host_read_counts(ctx_of(bed), 1)
    assert c.library[0] > c.reads[0] - c.library[0]  # most reads are inside transformers
    assert any("transformers" in site for site in c.library_sites)
    rep = PerfMeasurement(waits=[], computes=[], device="cpu", syncs=c.reads, module_calls=c.calls, sync_sites=c.sites,
                     library_syncs=c.library, library_sites=c.library_sites, library_callers=c.callers)
    from signalchain.checks.performance import _sync_bound

    found = _sync_bound(rep)
    assert loud(found) == [] and [f.evidence["owner"] for f in found] == ["library"]
    assert judge_performance(rep) == []  # nothing timed: nothing judged


def test_metadata_rows_from_the_beds_splits_get_one_info(bed):
    from signalchain.audit.memory import audit_clips

    rows = {s: [{"caption": e.caption, **e.metadata} for e in examples] for s, examples in bed.splits().items()}
    res = audit_clips(rows)
    assert not res.has_audio and [f.id for f in res.findings if f.severity.value != "info"] == []
    assert [f.id for f in res.findings].count("split.no_audio") == 1
    hf_rows = {s: [{"audio": {"array": e.audio[0], "sampling_rate": e.sample_rate}, "text": e.caption}
                   for e in examples] for s, examples in bed.splits().items()}
    assert loud(audit_clips(hf_rows).findings) == []
