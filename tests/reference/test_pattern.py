import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from signalchain.reference.pattern import (
    build_delay_pattern,
    pattern_valid_mask,
    revert_delay_pattern,
)

SPECIAL = 99


def test_small_example() -> None:
    codes = torch.tensor([[[1, 2, 3], [4, 5, 6], [7, 8, 9]]])  # [1, K=3, T=3]
    S = SPECIAL
    assert build_delay_pattern(codes, S).tolist() == [
        [[1, 2, 3, S, S], [S, 4, 5, 6, S], [S, S, 7, 8, 9]]
    ]
    assert pattern_valid_mask(3, 3).int().tolist() == [
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
    ]


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(1, 3),
    K=st.integers(1, 6),
    T=st.integers(0, 12),
    C=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_build_revert_against_naive_loops(B: int, K: int, T: int, C: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, SPECIAL, (B, K, T), generator=g)
    pattern = build_delay_pattern(codes, SPECIAL)
    assert pattern.shape == (B, K, T + K - 1)
    expected = torch.full_like(pattern, SPECIAL)
    for k in range(K):
        for t in range(T):
            expected[:, k, t + k] = codes[:, k, t]
    assert torch.equal(pattern, expected)
    assert torch.equal(revert_delay_pattern(pattern), codes)
    assert torch.equal(pattern != SPECIAL, pattern_valid_mask(K, T).expand(B, K, T + K - 1))

    # logits-like input with extra trailing dims, non-contiguous on purpose
    x = torch.randn(B, K, T + K - 1, 2, C + 1, generator=g).transpose(-1, -2)
    out = revert_delay_pattern(x)
    assert out.shape == (B, K, T, C + 1, 2)
    for k in range(K):
        for t in range(T):
            assert torch.equal(out[:, k, t], x[:, k, t + k])


def test_revert_gradient_flows_to_the_right_steps() -> None:
    x = torch.zeros(1, 2, 4, 3, requires_grad=True)  # K=2, S=4 -> T=3
    revert_delay_pattern(x).sum().backward()
    assert x.grad[0, :, :, 0].tolist() == [[1, 1, 1, 0], [0, 1, 1, 1]]


def test_revert_rejects_too_short_sequences() -> None:
    with pytest.raises(ValueError, match="needs S >= 3 steps, got 2"):
        revert_delay_pattern(torch.zeros(1, 4, 2))
    with pytest.raises(ValueError, match=r"codes must be \[B, K, T\]"):
        build_delay_pattern(torch.zeros(4, 2, dtype=torch.long), SPECIAL)
