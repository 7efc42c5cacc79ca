"""Per-codebook CE from a model's output: against torch's own cross-entropy, codebook by codebook."""

from __future__ import annotations

import math

import pytest
import torch

from signalchain.integrations._codebooks import per_codebook_ce

B, K, T, V = 3, 4, 5, 7


def reference(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:  # [B, K, T, V], [B, K, T]
    return [float(torch.nn.functional.cross_entropy(logits[:, k].reshape(-1, V), labels[:, k].reshape(-1),
                                                    ignore_index=-100)) for k in range(K)]


def data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K, T, V, generator=g)
    labels = torch.randint(0, V, (B, K, T), generator=g)
    labels[0, 1, :3] = -100  # padding is ignored
    return logits, labels


@pytest.mark.parametrize("layout", ["bktv", "flat", "btk", "flat-btk"])
def test_codebook_layouts_match_torch(layout: str) -> None:
    logits, labels = data()
    want = reference(logits, labels)
    if layout == "flat":  # HF MusicGen's logits [B*K, T, V]
        got = per_codebook_ce({"logits": logits.reshape(B * K, T, V)}, labels)
    elif layout == "btk":  # and its labels [B, T, K]
        got = per_codebook_ce({"logits": logits}, labels.transpose(1, 2))
    elif layout == "flat-btk":  # both together, as HF MusicGen's forward returns them (issue 25)
        got = per_codebook_ce({"logits": logits.reshape(B * K, T, V)}, labels.transpose(1, 2))
    else:
        got = per_codebook_ce({"logits": logits, "labels": labels})
    assert got == pytest.approx(want, rel=1e-5)


def test_a_reported_per_codebook_loss_wins_and_a_plain_lm_has_none() -> None:
    assert per_codebook_ce({"loss_per_codebook": torch.tensor([1.0, 2.0])}) == [1.0, 2.0]
    assert per_codebook_ce({"logits": torch.randn(2, 5, V)}, torch.randint(0, V, (2, 5))) is None
    assert per_codebook_ce({"loss": torch.tensor(1.0)}) is None


def test_a_codebook_with_no_valid_position_is_nan() -> None:
    logits, labels = data()
    labels[:, 2] = -100
    got = per_codebook_ce({"logits": logits}, labels)
    assert math.isnan(got[2]) and all(math.isfinite(v) for i, v in enumerate(got) if i != 2)
