import math

import pytest
import torch
import torch.nn.functional as F

from signalchain.reference.model import ModelConfig, MusicLM, masked_cross_entropy
from signalchain.reference.text import WordTokenizer

VOCAB = ["warm", "piano", "bright", "drums", "slow", "fast"]
K, CARD = 4, 256


@pytest.fixture
def model() -> MusicLM:
    torch.manual_seed(0)
    return MusicLM(ModelConfig(text_vocab_size=len(VOCAB) + 2))


def _condition(model: MusicLM, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = WordTokenizer(VOCAB).encode(captions)
    return model.encode_condition(ids, mask)


def _codes(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CARD, (B, K, T), generator=torch.Generator().manual_seed(seed))


def test_structure_and_size(model: MusicLM) -> None:
    assert len(model.embeddings) == len(model.heads) == K
    assert model.embeddings[0].num_embeddings == CARD + 1
    assert model.heads[0].out_features == CARD
    assert model.special_token == CARD
    assert 0.8e6 < model.num_parameters() < 1.5e6


def test_shapes(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["warm piano", "fast drums"])
    assert cond.shape == (2, 24, 128) and cond_mask.dtype == torch.bool
    assert model(_codes(2, 10), cond, cond_mask).shape == (2, K, 10, CARD)
    logits, mask = model.compute_predictions(_codes(2, 10), cond, cond_mask)
    assert logits.shape == (2, K, 10, CARD)
    assert mask.shape == (2, K, 10) and mask.dtype == torch.bool and mask.all()


def test_forward_is_causal(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["warm piano"])
    seq = _codes(1, 20)
    changed = seq.clone()
    changed[:, :, 12] = (changed[:, :, 12] + 1) % CARD
    a, b = model(seq, cond, cond_mask), model(changed, cond, cond_mask)
    torch.testing.assert_close(a[:, :, :12], b[:, :, :12])
    assert not torch.allclose(a[:, :, 12], b[:, :, 12])


def test_predictions_never_see_their_targets(model: MusicLM) -> None:
    # Code (k, t) sits at pattern step t + k and enters the input one step later, so changing
    # frame t0 may only affect predictions made at pattern steps t + k > t0.
    cond, cond_mask = _condition(model, ["warm piano"])
    codes, t0 = _codes(1, 16), 7
    changed = codes.clone()
    changed[:, :, t0] = (changed[:, :, t0] + 1) % CARD
    a, _ = model.compute_predictions(codes, cond, cond_mask)
    b, _ = model.compute_predictions(changed, cond, cond_mask)
    for k in range(K):
        torch.testing.assert_close(a[:, k, : t0 - k + 1], b[:, k, : t0 - k + 1])
        assert not torch.allclose(a[:, k, t0 - k + 1 :], b[:, k, t0 - k + 1 :])


def test_condition_changes_logits(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["warm slow piano", "bright fast drums"])
    codes = _codes(1, 8).expand(2, K, 8)
    logits, _ = model.compute_predictions(codes, cond, cond_mask)
    assert (logits[0] - logits[1]).abs().max() > 1e-3


def test_empty_condition_is_finite_and_ignores_masked_values(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["", "warm piano"])
    assert not cond_mask[0].any() and (cond[0] == 0).all()
    codes = _codes(2, 8)
    logits, _ = model.compute_predictions(codes, cond, cond_mask)
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    garbage = torch.randn_like(cond) * 100  # values under an all-False mask must not matter
    other, _ = model.compute_predictions(codes, garbage, torch.zeros_like(cond_mask))
    torch.testing.assert_close(other[0], logits[0])


def test_initial_loss_is_near_uniform(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["warm piano", "fast drums", "", "slow"])
    codes = _codes(4, 50)
    logits, mask = model.compute_predictions(codes, cond, cond_mask)
    loss, per_codebook = masked_cross_entropy(logits, codes, mask)
    assert abs(loss.item() - math.log(CARD)) < 0.3
    assert per_codebook.shape == (K,)


def test_masked_cross_entropy_matches_torch_and_handles_empty_mask() -> None:
    logits, targets = torch.randn(2, K, 5, 7), torch.randint(0, 7, (2, K, 5))
    mask = torch.rand(2, K, 5) > 0.3
    loss, per = masked_cross_entropy(logits, targets, mask)
    torch.testing.assert_close(loss, F.cross_entropy(logits[mask], targets[mask]))
    torch.testing.assert_close(
        per[1], F.cross_entropy(logits[:, 1][mask[:, 1]], targets[:, 1][mask[:, 1]])
    )
    empty, _ = masked_cross_entropy(logits, targets, torch.zeros_like(mask))
    assert empty.item() == 0.0


def test_overfits_one_tiny_batch(model: MusicLM) -> None:
    ids, mask = WordTokenizer(VOCAB).encode(["warm slow piano", "bright fast drums"])
    codes = _codes(2, 32, seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(100):
        cond, cond_mask = model.encode_condition(ids, mask)
        logits, valid = model.compute_predictions(codes, cond, cond_mask)
        loss, _ = masked_cross_entropy(logits, codes, valid)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1.0


def test_too_long_sequence_is_refused(model: MusicLM) -> None:
    cond, cond_mask = _condition(model, ["piano"])
    with pytest.raises(ValueError, match="513 steps but the model has max_steps=512"):
        model(torch.zeros(1, K, 513, dtype=torch.long), cond, cond_mask)
