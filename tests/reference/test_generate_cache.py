"""The key/value cache of the reference model's generate (`incremental.py`): the same tokens as
re-running the whole prefix each step, one new position per step, and no cache where a patched
forward or a hook would be bypassed."""

import types

import pytest
import torch

from signalchain.reference import generate as generate_module
from signalchain.reference.generate import SamplingConfig, generate
from signalchain.reference.incremental import KVCache, cache_applies, forward_cached
from signalchain.reference.model import ModelConfig, MusicLM, SelfAttention
from signalchain.reference.text import WordTokenizer

VOCAB = ["warm", "piano", "bright", "drums"]
SEEDS = (0, 1, 2, 3)


def _model(k: int = 4, seed: int = 0, sharpen: float = 1.0) -> MusicLM:
    torch.manual_seed(seed)
    model = MusicLM(ModelConfig(text_vocab_size=len(VOCAB) + 2, n_codebooks=k, cardinality=64, dim=32,
                                heads=2, layers=2, max_steps=64))
    with torch.no_grad():  # larger weights: peaked, input-dependent logits (a fresh model's are near uniform)
        for p in model.parameters():
            p.mul_(sharpen)
    return model.eval()


def _condition(model: MusicLM, captions: tuple[str, ...] = ("warm piano", "bright drums", "")) -> tuple:
    ids, mask = WordTokenizer(VOCAB).encode(list(captions))
    with torch.no_grad():
        return model.encode_condition(ids, mask)


SETTINGS = {
    "greedy": dict(greedy=True, cfg_coef=1.0),
    "greedy_cfg": dict(greedy=True, cfg_coef=3.0),
    "sampled": dict(cfg_coef=1.0),
    "sampled_cfg": dict(cfg_coef=3.0),
    "temperature_top_k": dict(temperature=0.7, top_k=8, cfg_coef=2.0),
    "top_p": dict(top_p=0.8, cfg_coef=1.0),
}


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_cached_and_uncached_generate_give_the_same_tokens(name: str, k: int) -> None:
    for seed in SEEDS:
        model = _model(k, seed, sharpen=4.0)
        cond, mask = _condition(model)
        cfg = SamplingConfig(max_frames=20, seed=seed, keep_logits=True, **SETTINGS[name])
        full = generate(model, cond, mask, cfg, use_cache=False)
        cached = generate(model, cond, mask, cfg, use_cache=True)
        assert torch.equal(full.codes, cached.codes), (name, k, seed)
        assert (full.frames_generated, full.stopped) == (cached.frames_generated, cached.stopped)
        # What the sampler saw agrees to float rounding (the batched matrix products differ by ulps).
        torch.testing.assert_close(cached.logits, full.logits, rtol=1e-4, atol=1e-4, equal_nan=True)
        if full.cond_logits is not None:
            torch.testing.assert_close(cached.cond_logits, full.cond_logits, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("prompt_frames", [1, 7, 19])
def test_a_prompt_is_prefilled_and_continued_identically(prompt_frames: int) -> None:
    # 19 of 20 frames: the steps between the last frame and the prompt's end sample nothing and are
    # skipped, so the cache takes several positions at once there (causal with an offset).
    for seed in SEEDS:
        model = _model(4, seed, sharpen=4.0)
        cond, mask = _condition(model)
        prompt = torch.randint(0, 64, (3, 4, prompt_frames), generator=torch.Generator().manual_seed(seed))
        cfg = SamplingConfig(max_frames=20, seed=seed, prompt=prompt, cfg_coef=2.0)
        full = generate(model, cond, mask, cfg, use_cache=False)
        cached = generate(model, cond, mask, cfg, use_cache=True)
        assert torch.equal(full.codes, cached.codes), (prompt_frames, seed)
        assert torch.equal(cached.codes[:, :, :prompt_frames], prompt)


def test_the_silence_stop_fires_at_the_same_frame() -> None:
    silence = torch.tensor([3, 1, 4, 1])
    stops = []
    for seed in SEEDS:
        model = _model(4, seed, sharpen=4.0)
        with torch.no_grad():  # make the silence codes likely, so that rows go silent and stop
            for head, code in zip(model.heads, silence.tolist(), strict=True):
                head.bias[code] += 12.0
        cond, mask = _condition(model)
        cfg = SamplingConfig(max_frames=30, seed=seed, stop_after_silence_frames=2, silence_codes=silence)
        full = generate(model, cond, mask, cfg, use_cache=False)
        cached = generate(model, cond, mask, cfg, use_cache=True)
        assert torch.equal(full.codes, cached.codes)
        assert (full.frames_generated, full.stopped) == (cached.frames_generated, cached.stopped)
        stops.append(cached.frames_generated if cached.stopped else None)
    assert any(stops), stops
    print(stops)  # the stop fired (before the last frame) on some seeds


def test_the_cached_step_matches_the_full_forward_position_by_position() -> None:
    model = _model(4, 0, sharpen=4.0)
    cond, mask = _condition(model)
    seq = torch.randint(0, 65, (3, 4, 30), generator=torch.Generator().manual_seed(0))  # 64 = special
    with torch.no_grad():
        full = model(seq, cond, mask)  # [B, K, S, C]
        cache = KVCache(model, cond, mask, 30)
        chunks = [forward_cached(model, seq[:, :, a:b], cache) for a, b in ((0, 5), (5, 6), (6, 13), (13, 30))]
    torch.testing.assert_close(torch.cat(chunks, dim=2), full, rtol=1e-5, atol=1e-5)
    assert cache.length == 30
    with pytest.raises(ValueError, match="cache holds"):
        forward_cached(model, seq[:, :, :1], cache)


def test_each_step_after_the_first_decodes_one_position(monkeypatch: pytest.MonkeyPatch) -> None:
    widths: list[int] = []
    inner = generate_module.forward_cached

    def counting(model: MusicLM, sequence: torch.Tensor, cache: KVCache) -> torch.Tensor:
        widths.append(sequence.shape[-1])
        return inner(model, sequence, cache)

    monkeypatch.setattr(generate_module, "forward_cached", counting)
    model = _model(4)
    cond, mask = _condition(model)
    result = generate(model, cond, mask, SamplingConfig(max_frames=12))  # the default: the cache
    steps = 12 + 4 - 1
    assert widths == [1] * steps  # O(1) positions a token, never the prefix
    assert result.frames_generated == 12


def _hook_forcing_code(code: int):
    def force(module: torch.nn.Module, args: tuple, logits: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(logits, -1e9)
        out[..., code] = 0.0
        return out
    return force


def test_a_model_the_cache_would_bypass_runs_the_full_forward() -> None:
    model = _model(4)
    assert cache_applies(model)
    cond, mask = _condition(model)
    cfg = SamplingConfig(max_frames=8, cfg_coef=1.0)

    # A logits processor as a forward hook on the model (the way the generation_silence_only fault
    # works): the cache would skip it, so generate does not use the cache and the hook acts.
    handle = model.register_forward_hook(_hook_forcing_code(5))
    assert not cache_applies(model)
    assert bool((generate(model, cond, mask, cfg).codes == 5).all())
    with pytest.raises(ValueError, match="not a plain MusicLM"):
        generate(model, cond, mask, cfg, use_cache=True)
    handle.remove()
    assert cache_applies(model) and not bool((generate(model, cond, mask, cfg).codes == 5).all())

    hooked = _model(4)
    hooked.positions.register_forward_pre_hook(lambda m, args: (torch.zeros_like(args[0]),))
    patched = _model(4)
    attn = patched.blocks[0].self_attn
    attn.forward = types.MethodType(SelfAttention.forward, attn)
    replaced = _model(4)
    replaced.add_null_slot = lambda c, m: (c, m)

    class Sub(MusicLM):
        pass

    sub = Sub(_model(4).config)
    for m in (hooked, patched, replaced, sub):
        assert not cache_applies(m)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)
    try:
        assert not cache_applies(model)  # a global hook (a probe) sees every module call: keep them
    finally:
        handle.remove()
    assert cache_applies(model)
    # A model that is never plain still generates, through the full forward.
    full = generate(hooked, cond, mask, cfg)
    assert full.codes.shape == (3, 4, 8)
