"""The HF adapter's code cache: keyed by the audio's and the codec's content, bit-identical on a hit,
bounded, and out of the way wherever skipping the codec could change more than the time taken."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from signalchain import record, tap  # noqa: E402
from signalchain.integrations.hf_musicgen.codes_cache import CodesCache, mode_sensitive  # noqa: E402
from signalchain.reference.hf import HFBedConfig, HFBedPipeline  # noqa: E402


@pytest.fixture(scope="module")
def bed() -> HFBedPipeline:
    torch.set_num_threads(1)
    return HFBedPipeline(HFBedConfig(examples=12))


@pytest.fixture(scope="module")
def audio(bed: HFBedPipeline) -> torch.Tensor:
    cropped, _ = bed.prepare_audio(bed.golden_batch(0), lambda *a, **k: None)
    return torch.from_numpy(cropped)


def fresh(bed: HFBedPipeline) -> tuple[torch.nn.Module, CodesCache]:
    """A model in training mode (as `train_step` leaves it) and an empty cache on the bed."""
    model = bed.build_model(0)
    model.train()
    bed.codes_cache = CodesCache()
    return model, bed.codes_cache


def uncached(bed: HFBedPipeline, model: torch.nn.Module, audio: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.audio_encoder.encode(audio, bandwidth=bed.bandwidth).audio_codes[0]


class Calls:
    """Counts the codec encoder's forward calls (installed after the cached encode, then removed)."""

    def __init__(self, model: torch.nn.Module):
        self.n = 0
        self.handle = model.audio_encoder.encoder.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.n += 1


def test_a_hit_returns_the_codes_a_recompute_gives(bed, audio):
    model, cache = fresh(bed)
    first = bed.encode(model, audio)
    second = bed.encode(model, audio)
    assert (cache.misses, cache.hits) == (1, 1)
    assert torch.equal(second, uncached(bed, model, audio)) and second.dtype == first.dtype
    second[0, 0, 0] += 1  # the caller owns what it gets: the cached entry is not touched
    assert torch.equal(bed.encode(model, audio), first)


def test_changed_audio_misses(bed, audio):
    model, cache = fresh(bed)
    bed.encode(model, audio)
    other = audio.clone()
    other[0, 0, 1234] += 1e-3  # one sample of one clip
    codes = bed.encode(model, other)
    assert (cache.misses, cache.hits) == (2, 0)
    assert torch.equal(codes, uncached(bed, model, other))


@pytest.mark.parametrize("how", ["in place", "through .data", "load_state_dict"])
def test_changed_codec_weights_miss(bed, audio, how):
    model, cache = fresh(bed)
    before = bed.encode(model, audio)
    layer = model.audio_encoder.quantizer.layers[0].codebook
    embed = layer.embed.clone()
    embed[: embed.shape[0] // 2] = embed.flip(0)[: embed.shape[0] // 2]  # half of codebook 0 swapped
    if how == "in place":
        with torch.no_grad():
            layer.embed.copy_(embed)
    elif how == "through .data":  # bumps no version counter: only the content says it changed
        layer.embed.data.copy_(embed)
    else:
        state = model.audio_encoder.state_dict()
        state["quantizer.layers.0.codebook.embed"] = embed
        model.audio_encoder.load_state_dict(state)
    after = bed.encode(model, audio)
    assert (cache.misses, cache.hits) == (2, 0)
    assert torch.equal(after, uncached(bed, model, audio))
    assert not torch.equal(after, before)  # the edit changes the codes, so a stale hit would show


def test_a_trained_or_watched_codec_is_never_served_from_the_cache(bed, audio):
    model, cache = fresh(bed)
    bed.encode(model, audio)
    calls = Calls(model)  # a hook on the codec: someone expects to see it run
    bed.encode(model, audio)
    calls.handle.remove()
    assert calls.n == 1 and cache.hits == 0
    with torch.autograd.profiler.profile():  # the profile family measures the step as training pays it
        bed.encode(model, audio)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Watch():
        bed.encode(model, audio)
    model.audio_encoder.requires_grad_(True)  # the codec trained along
    bed.encode(model, audio)
    assert (cache.hits, cache.misses, cache.bypassed) == (0, 1, 4)


def test_training_mode_bypasses_only_where_it_changes_the_output(bed, audio):
    model, cache = fresh(bed)
    assert model.audio_encoder.training and not mode_sensitive(model.audio_encoder)  # HF's Encodec
    bed.encode(model, audio)
    bed.encode(model, audio)
    assert cache.hits == 1
    model.audio_encoder.extra = torch.nn.Dropout(0.1)  # a codec with dropout
    assert mode_sensitive(model.audio_encoder) and cache._survey(model.audio_encoder, audio) is None
    model.audio_encoder.eval()
    assert cache._survey(model.audio_encoder, audio) is not None
    model.audio_encoder.extra = Jitter()  # a module of the user's own that reads `training`
    model.audio_encoder.train()
    assert mode_sensitive(model.audio_encoder) and cache._survey(model.audio_encoder, audio) is None
    model.audio_encoder.extra = torch.nn.Dropout(0.0)  # no dropout at p=0: training mode changes nothing
    assert not mode_sensitive(model.audio_encoder) and cache._survey(model.audio_encoder, audio) is not None


class Jitter(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1e-3 * torch.randn_like(x) if self.training else x


def test_a_codec_that_draws_random_numbers_is_not_cached(bed, audio):
    model, cache = fresh(bed)
    encode = model.audio_encoder.encode

    def noisy(x, **kw):
        return encode(x + 1e-4 * torch.randn_like(x), **kw)  # stochastic: not a function of the key

    model.audio_encoder.encode = noisy
    bed.encode(model, audio)
    bed.encode(model, audio)
    assert cache.hits == 0 and len(cache) == 0 and cache.bypassed == 2  # a method replaced on the instance
    del model.audio_encoder.encode
    quantize = type(model.audio_encoder.quantizer.layers[0]).encode

    def drawing(self, x):  # on the class: the key cannot see it, the miss's RNG check does
        torch.rand(1)
        return quantize(self, x)

    try:
        type(model.audio_encoder.quantizer.layers[0]).encode = drawing
        bed.encode(model, audio)
        bed.encode(model, audio)
    finally:
        type(model.audio_encoder.quantizer.layers[0]).encode = quantize
    assert cache.hits == 0 and len(cache) == 0 and cache.misses == 1 and cache.bypassed == 3


def test_a_changed_module_setting_misses(bed, audio):
    model, cache = fresh(bed)
    bed.encode(model, audio)
    act = next(m for m in model.audio_encoder.encoder.modules() if isinstance(m, torch.nn.ELU))
    act.alpha = 0.5  # no parameter changes; the module's settings do
    codes = bed.encode(model, audio)
    assert (cache.misses, cache.hits) == (2, 0) and torch.equal(codes, uncached(bed, model, audio))


def test_memory_is_bounded(bed, audio):
    model, _ = fresh(bed)
    bed.codes_cache = cache = CodesCache(max_entries=2)
    for i in range(4):
        bed.encode(model, audio * (1 + i / 10))
    assert len(cache) == 2 and cache.nbytes == 2 * bed.encode(model, audio).numel() * 8
    small = CodesCache(max_entries=100, max_bytes=20_000)  # room for one [4, 4, 100] int64 entry
    bed.codes_cache = small
    for i in range(3):
        bed.encode(model, audio * (1 + i / 10))
    assert len(small) == 1 and small.nbytes <= 20_000


def test_the_tokens_tap_is_identical_on_a_hit(bed):
    model, cache = fresh(bed)
    batch = bed.golden_batch(0)
    values = []
    for _ in range(2):
        with record(values=True) as trace, torch.no_grad():
            bed.step(model, batch, tap)
        values.append(trace.value("tokens"))
    assert (cache.misses, cache.hits) == (1, 1)
    assert torch.equal(torch.as_tensor(values[0]), torch.as_tensor(values[1]))



def test_cache_codes_0_turns_it_off(audio):
    from signalchain.integrations.hf_musicgen import HFMusicgenPipeline, examples_from_clips, parse_settings
    from signalchain.reference.hf.tiny import bed_clips, tiny_model, tiny_tokenizer

    off = HFMusicgenPipeline(tiny_model, tokenizer=tiny_tokenizer(), data=examples_from_clips(bed_clips(4)),
                             **parse_settings(["cache_codes=0"]))
    model = off.build_model(0)
    first = off.encode(model, audio)
    assert torch.equal(off.encode(model, audio), first)
    assert (off.codes_cache.hits, off.codes_cache.bypassed, len(off.codes_cache)) == (0, 2, 0)
