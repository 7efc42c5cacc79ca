"""What generate and decode hand back, in every convention a real stack uses (DESIGN §3), and the
conditioning, generation and output families on pipelines written in HF's conventions: logits
`[B*K, T, V]`, generate returning audio only or a `ModelOutput`, `decode(tokens, model)`.

The fakes wrap the reference pipeline, so the only thing that differs from it is the convention."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch

from signalchain.checks.conditioning_model import judge_sensitivity
from signalchain.checks.output import judge_route
from signalchain.experiments._outputs import call_decode, decode_takes_model, read_generated
from signalchain.experiments.conditioning import measure_guidance
from signalchain.experiments.conditioning_sensitivity import measure_sensitivity
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.doctor import run_doctor
from signalchain.experiments.generation.runs import take
from signalchain.experiments.output import measure_route
from signalchain.pipeline import ProtocolView, StepOutput
from signalchain.reference import ReferencePipeline

torch.set_num_threads(1)
ECONOMY = BUDGETS["economy"]


# ---- read_generated / call_decode -------------------------------------------------------------------

class FakeModelOutput(OrderedDict):
    """What transformers' ModelOutput is: an OrderedDict with attribute access, None fields left out."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


class Result:
    def __init__(self, **kw: Any):
        self.__dict__.update(kw)


def test_read_generated_sorts_every_convention_by_dtype() -> None:
    codes = torch.randint(0, 64, (2, 4, 10))
    audio = torch.randn(2, 1, 3200)
    got = read_generated(codes)
    assert got.codes.shape == (2, 4, 10) and got.audio is None and got.sample_rate is None
    got = read_generated(audio, 16000)
    assert got.codes is None and got.audio.shape == (2, 1, 3200) and got.sample_rate == 16000
    assert read_generated(audio[:, 0]).audio.shape == (2, 1, 3200)  # [B, S]
    got = read_generated({"tokens": codes, "audio": audio, "sample_rate": 32000}, 16000)
    assert got.codes.shape == (2, 4, 10) and got.audio.shape == (2, 1, 3200) and got.sample_rate == 32000
    # HF's generate(return_dict_in_generate=True) puts the *audio* in `sequences`
    got = read_generated(FakeModelOutput(sequences=audio, scores=None))
    assert got.codes is None and got.audio.shape == (2, 1, 3200)
    got = read_generated(FakeModelOutput(audio_values=audio, audio_codes=codes))
    assert got.codes.shape == (2, 4, 10) and got.audio is not None
    got = read_generated(Result(codes=codes, frames_generated=10))  # the reference's GenerationResult
    assert got.codes.shape == (2, 4, 10)
    got = read_generated((codes, audio))
    assert got.codes is not None and got.audio is not None
    flat = codes.reshape(8, 10)  # HF's decoder-only [B*K, T]
    assert read_generated(flat, codebooks=4).codes.shape == (2, 4, 10)
    assert read_generated("no") == (None, None, None) and read_generated(None).describe() == "neither codes nor audio"


def test_read_generated_from_a_transformers_model_output() -> None:
    transformers = pytest.importorskip("transformers")
    from dataclasses import dataclass

    @dataclass
    class Out(transformers.utils.ModelOutput):
        sequences: torch.Tensor | None = None
        audio_values: torch.Tensor | None = None

    got = read_generated(Out(sequences=torch.randn(1, 1, 800)))
    assert got.codes is None and got.audio.shape == (1, 1, 800)


class Decoders:
    """decode in its four spellings."""

    @staticmethod
    def plain():
        class P:
            def decode(self, tokens):
                return torch.zeros(1, 1, 8)
        return P()

    @staticmethod
    def needs_model():
        class P:
            def decode(self, tokens, model):
                assert model == "M"
                return {"audio_values": torch.ones(1, 1, 8)}
        return P()

    @staticmethod
    def optional_model():
        class P:
            def decode(self, tokens, model=None):
                return torch.full((1, 1, 8), 2.0 if model == "M" else 3.0)
        return P()

    @staticmethod
    def keyword_model():
        class P:
            def decode(self, tokens, *, model=None):
                return torch.full((1, 1, 8), 4.0 if model == "M" else 5.0)
        return P()


def test_call_decode_hands_the_model_to_a_decode_that_takes_it() -> None:
    t = torch.zeros(1, 4, 2, dtype=torch.long)
    assert decode_takes_model(Decoders.plain()) is None
    assert float(call_decode(Decoders.plain(), t, "M").sum()) == 0
    assert decode_takes_model(Decoders.needs_model()) == "keyword"
    assert float(call_decode(Decoders.needs_model(), t, "M")[0, 0, 0]) == 1.0  # the audio out of the dict
    with pytest.raises(TypeError, match="needs the model"):
        call_decode(Decoders.needs_model(), t)
    assert float(call_decode(Decoders.optional_model(), t, "M")[0, 0, 0]) == 2.0
    assert float(call_decode(Decoders.optional_model(), t)[0, 0, 0]) == 3.0
    assert float(call_decode(Decoders.keyword_model(), t, "M")[0, 0, 0]) == 4.0


def test_take_cuts_a_dict_batch_by_its_columns() -> None:
    batch = {"audio": [1, 2, 3, 4], "caption": list("abcd"), "sampling_rate": 16000, "seed": 3,
             "mask": torch.zeros(4, 2)}
    cut = take(batch, 2)
    assert cut["caption"] == ["a", "b"] and cut["mask"].shape == (2, 2) and cut["seed"] == 3


# ---- HF-style pipelines on the reference model ---------------------------------------------------------

class FlatLogits(ReferencePipeline):
    """Taps and returns logits as HF does: [B*K, T, V] (row i is not example i)."""

    def step(self, model: Any, batch: Any, tap: Any = None) -> StepOutput:
        def flat(stage: str, value: Any, /, **meta: Any) -> Any:
            if stage == "logits" and isinstance(value, torch.Tensor) and value.dim() == 4:
                (tap or (lambda s, v, /, **m: v))(stage, value.reshape(-1, *value.shape[2:]), **meta)
                return value
            return tap(stage, value, **meta) if tap is not None else value

        out = super().step(model, batch, flat)
        if out.logits is not None and out.logits.dim() == 4:
            out.logits = out.logits.reshape(-1, *out.logits.shape[2:])
        return out


class AudioOnly(FlatLogits):
    """generate returns what HF's model.generate does: audio only; decode takes the model."""

    render = None  # the output route is generate + decode, as in a user's pipeline

    def generate(self, model: Any, batch: Any, sampling: Any = None) -> torch.Tensor:
        return super().decode(super().generate(model, batch, sampling).codes)

    def decode(self, tokens: Any, model: Any) -> torch.Tensor:
        assert model is not None
        return super().decode(tokens)


class ModelOutputGenerate(FlatLogits):
    """generate returns a ModelOutput with the codes and the audio (and no tap)."""

    render = None

    def generate(self, model: Any, batch: Any, sampling: Any = None) -> FakeModelOutput:
        codes = super().generate(model, batch, sampling).codes
        return FakeModelOutput(sequences=codes, audio_values=super().decode(codes))


def _ctx(p: Any, seed: int = 0) -> Context:
    return Context(ProtocolView(p), seed=seed, budget=ECONOMY)


def test_sensitivity_reads_flat_logits_per_example() -> None:
    """With [B*K, T, V] logits, row i is codebook i % K of example i // K: read canonically, the
    reference's own response to the caption is found, not a zero from comparing the wrong rows."""
    ref = measure_sensitivity(_ctx(ReferencePipeline()))
    flat = measure_sensitivity(_ctx(FlatLogits()))
    assert flat.error is None and flat.rows == ref.rows
    for k, v in ref.logits_change.items():
        assert flat.logits_change[k] == pytest.approx(v, rel=1e-6)
    assert flat.control == 0.0 and judge_sensitivity(flat) == []


def test_audio_only_generate_and_a_decode_that_needs_the_model() -> None:
    r = run_doctor(ProtocolView(AudioOnly()), families=["conditioning", "generation", "output"], seed=0,
                   budget="economy")
    bad = [(f.id, f.severity.value, f.message[:120]) for f in r.findings if f.severity.value != "info"]
    assert bad == []
    ids = {f.id for f in r.findings}
    assert "internal.check_failed" not in ids and "output.route_failed" not in ids
    assert {"generation.codes_unavailable", "output.codes_unavailable"} <= ids
    probe = measure_guidance(_ctx(AudioOnly()))
    assert probe.error is None and probe.compared == "audio" and probe.changed["null caption"] > 0


def test_model_output_generate_is_read_for_codes_and_audio() -> None:
    ctx = _ctx(ModelOutputGenerate())
    route, trace = measure_route(ctx)
    assert route.error is None and route.audio_only is None and len(route.tokens_shape) == 3
    assert trace.get("audio.decoded") is not None
    assert [f for f in judge_route(route) if f.severity.value != "info"] == []


# ---- the real HF bed ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_bed() -> Any:
    pytest.importorskip("transformers")
    from signalchain.reference.hf import HFBedPipeline

    return HFBedPipeline()


def test_hf_bed_caption_sensitivity_and_output_route(hf_bed: Any) -> None:
    """HF logits [B*K, T', V]; generate returns {"tokens", "audio", "sample_rate"}; decode(tokens, model)."""
    ctx = _ctx(hf_bed)
    s = measure_sensitivity(ctx)
    assert s.error is None and s.rows >= 2
    assert min(s.logits_change.values()) > 100 * s.floor  # the fresh decoder's cross-attention does respond
    assert judge_sensitivity(s) == []
    route, _ = measure_route(ctx)
    assert route.error is None and route.audio_only is None and route.tokens_shape[1] == hf_bed.num_codebooks
    assert [f for f in judge_route(route) if f.severity.value != "info"] == []
    got = read_generated(hf_bed.generate(ctx.fresh_model(), take(ctx.batch(), 1), {"max_frames": 4}))
    assert got.codes.shape[:2] == (1, hf_bed.num_codebooks) and got.audio.ndim == 3 and got.sample_rate
