import pytest
import torch

from signalchain.reference.generate import GenerationResult, SamplingConfig, generate, sample_next
from signalchain.reference.model import ModelConfig, MusicLM
from signalchain.reference.text import WordTokenizer

VOCAB = ["warm", "piano", "bright", "drums"]
K, CARD = 4, 256
SILENCE = torch.tensor([3, 1, 4, 1])


@pytest.fixture
def model() -> MusicLM:
    torch.manual_seed(0)
    return MusicLM(ModelConfig(text_vocab_size=len(VOCAB) + 2))


def _condition(model: MusicLM) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = WordTokenizer(VOCAB).encode(["warm piano", "bright drums"])
    with torch.no_grad():
        return model.encode_condition(ids, mask)


def _bias_heads(model: MusicLM, codes: torch.Tensor) -> None:
    with torch.no_grad():
        for head, code in zip(model.heads, codes.tolist(), strict=True):
            head.bias.zero_()
            head.bias[code] = 50.0


# --- sample_next -------------------------------------------------------------------------------


def _logits() -> torch.Tensor:
    return torch.randn(64, CARD, generator=torch.Generator().manual_seed(0)) * 3


@pytest.mark.parametrize(
    "cfg",
    [
        SamplingConfig(greedy=True),
        SamplingConfig(temperature=0.0),
        SamplingConfig(temperature=1e-6),
        SamplingConfig(temperature=1e-30),
        SamplingConfig(top_k=1),
        SamplingConfig(top_p=1e-6),
    ],
    ids=["greedy", "temp0", "temp1e-6", "temp1e-30", "topk1", "topp_tiny"],
)
def test_degenerate_settings_are_argmax(cfg: SamplingConfig) -> None:
    logits = _logits()
    assert torch.equal(sample_next(logits, cfg), logits.argmax(-1))


def test_sampling_is_seeded() -> None:
    logits, cfg = _logits(), SamplingConfig()
    a = sample_next(logits, cfg, torch.Generator().manual_seed(1))
    b = sample_next(logits, cfg, torch.Generator().manual_seed(1))
    c = sample_next(logits, cfg, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(sample_next(logits, cfg), sample_next(logits, cfg))  # cfg.seed default


def test_top_k_and_top_p_restrict_the_support() -> None:
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    logits = probs.log().expand(4000, 4)
    g = torch.Generator().manual_seed(0)
    assert set(sample_next(logits, SamplingConfig(top_k=2), g).tolist()) == {1, 3}
    assert set(sample_next(logits, SamplingConfig(top_p=0.7), g).tolist()) == {1, 3}
    assert set(sample_next(logits, SamplingConfig(top_p=0.85), g).tolist()) == {1, 2, 3}
    freq = sample_next(logits, SamplingConfig(), g).bincount(minlength=4) / 4000
    torch.testing.assert_close(freq, probs, atol=0.03, rtol=0)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="set both or neither"):
        SamplingConfig(stop_after_silence_frames=3)
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingConfig(top_p=1.5)


# --- generate ----------------------------------------------------------------------------------


def test_shapes_range_and_mode_restored(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    model.train()
    result = generate(model, cond, cond_mask, SamplingConfig(max_frames=12))
    assert isinstance(result, GenerationResult)
    assert result.codes.shape == (2, K, 12) and result.codes.dtype == torch.long
    assert 0 <= int(result.codes.min()) and int(result.codes.max()) < CARD  # no special token
    assert result.frames_generated == 12 and not result.stopped
    assert model.training


def test_seeds_reproducible(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    a = generate(model, cond, cond_mask, SamplingConfig(max_frames=10, seed=1)).codes
    b = generate(model, cond, cond_mask, SamplingConfig(max_frames=10, seed=1)).codes
    c = generate(model, cond, cond_mask, SamplingConfig(max_frames=10, seed=2)).codes
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_sampler_logits_are_kept_only_when_asked(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    plain = generate(model, cond, cond_mask, SamplingConfig(max_frames=8, greedy=True))
    assert plain.logits is None and plain.cond_logits is None
    kept = generate(model, cond, cond_mask, SamplingConfig(max_frames=8, greedy=True, keep_logits=True))
    assert torch.equal(kept.codes, plain.codes)  # keeping them changes nothing sampled
    assert kept.logits.shape == (2, K, 8, CARD) and kept.cond_logits.shape == kept.logits.shape
    assert torch.equal(kept.logits.argmax(-1), kept.codes)  # greedy picks are the argmax of what was kept


def test_prompt_is_kept_verbatim(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    prompt = torch.randint(0, CARD, (2, K, 5), generator=torch.Generator().manual_seed(3))
    result = generate(model, cond, cond_mask, SamplingConfig(max_frames=9, prompt=prompt))
    assert torch.equal(result.codes[:, :, :5], prompt)
    assert result.prompt_frames == 5 and result.frames_generated == 9


@pytest.mark.parametrize("coef", [1.0, 3.0])
def test_greedy_output_is_a_fixed_point_of_the_training_layout(model: MusicLM, coef: float) -> None:
    # Greedy generation must agree with teacher-forced predictions on its own output, with the
    # guided logits uncond + coef * (cond - uncond) built here from two independent passes.
    cond, cond_mask = _condition(model)
    codes = generate(
        model, cond, cond_mask, SamplingConfig(greedy=True, cfg_coef=coef, max_frames=10)
    ).codes
    with torch.no_grad():
        c, _ = model.compute_predictions(codes, cond, cond_mask)
        u, _ = model.compute_predictions(codes, torch.zeros_like(cond), torch.zeros_like(cond_mask))
    assert torch.equal((u + coef * (c - u)).argmax(-1), codes)


def test_cfg_coef_one_equals_unguided_conditional_sampling(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    cfg = SamplingConfig(cfg_coef=1.0, max_frames=8, seed=5, top_k=20)
    got = generate(model, cond, cond_mask, cfg).codes
    # independent plain loop over the pattern: no guidance, conditional rows only
    T, S, special = 8, 8 + K - 1, model.special_token
    g = torch.Generator().manual_seed(5)
    pattern = torch.full((2, K, S), special)
    model.eval()
    with torch.no_grad():
        for s in range(S):
            inputs = torch.cat([torch.full((2, K, 1), special), pattern[:, :, :s]], dim=2)
            logits = model(inputs, cond, cond_mask)[:, :, -1]
            tokens = sample_next(logits.reshape(2 * K, CARD), cfg, g).view(2, K)
            for k in range(K):
                if 0 <= s - k < T:
                    pattern[:, k, s] = tokens[:, k]
    expected = torch.stack([pattern[:, k, k : k + T] for k in range(K)], dim=1)
    assert torch.equal(got, expected)


def test_stops_after_silence_and_pads(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    _bias_heads(model, SILENCE)
    prompt = torch.full((2, K, 2), 7)
    cfg = SamplingConfig(
        max_frames=20, prompt=prompt, stop_after_silence_frames=3, silence_codes=SILENCE
    )
    result = generate(model, cond, cond_mask, cfg)
    assert result.stopped and result.frames_generated == 2 + 3
    assert result.codes.shape == (2, K, 20)
    assert torch.equal(result.codes[:, :, :2], prompt)
    assert (result.codes[:, :, 2:] == SILENCE.view(1, K, 1)).all()


def test_no_stop_without_silence(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    _bias_heads(model, SILENCE + 1)
    cfg = SamplingConfig(max_frames=10, stop_after_silence_frames=2, silence_codes=SILENCE)
    result = generate(model, cond, cond_mask, cfg)
    assert not result.stopped and result.frames_generated == 10
    assert (result.codes == (SILENCE + 1).view(1, K, 1)).all()


def test_bad_prompt_is_refused(model: MusicLM) -> None:
    cond, cond_mask = _condition(model)
    with pytest.raises(ValueError, match=r"prompt must be \[B=2, K=4, P <= max_frames=4\]"):
        generate(model, cond, cond_mask, SamplingConfig(max_frames=4, prompt=torch.zeros(2, K, 5)))
