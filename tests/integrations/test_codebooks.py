"""Per-codebook CE from a model's output: against torch's own cross-entropy, codebook by codebook, and
against HF MusicGen's own loss on labels that hold its pad id (issue 40: the check crashed on them)."""

from __future__ import annotations

import math

import pytest
import torch

from signalchain.integrations._codebooks import label_ignore_ids, per_codebook_ce

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
    assert got.values == pytest.approx(want, rel=1e-5) and got.skipped == 0


def test_a_reported_per_codebook_loss_wins_and_a_plain_lm_has_none() -> None:
    assert per_codebook_ce({"loss_per_codebook": torch.tensor([1.0, 2.0])}).values == [1.0, 2.0]
    assert per_codebook_ce({"logits": torch.randn(2, 5, V)}, torch.randint(0, V, (2, 5))) is None
    assert per_codebook_ce({"loss": torch.tensor(1.0)}) is None


def test_a_codebook_with_no_valid_position_is_nan() -> None:
    logits, labels = data()
    labels[:, 2] = -100
    got = per_codebook_ce({"logits": logits}, labels).values
    assert math.isnan(got[2]) and all(math.isfinite(v) for i, v in enumerate(got) if i != 2)


def test_the_models_pad_id_is_ignored_and_other_values_outside_the_vocabulary_are_skipped_not_raised() -> None:
    logits, labels = data()
    labels[1, 0, :2] = V  # the pad id of an HF MusicGen (= the codebook size): its own loss masks it
    labels[2, 3, 4] = V + 5  # a value no convention explains
    want = reference(logits, torch.where((labels == V) | (labels == V + 5), torch.full_like(labels, -100), labels))
    got = per_codebook_ce({"logits": logits}, labels, ignore_ids=(-100, V))
    assert got.values == pytest.approx(want, rel=1e-5)
    assert got.ignored == 3 + 2 and got.skipped == 1 and got.skipped_values == (V + 5,)
    plain = per_codebook_ce({"logits": logits}, labels)  # without the pad id both are skipped, never raised
    assert plain.values == pytest.approx(want, rel=1e-5) and plain.skipped == 3


def test_float_labels_are_no_class_labels() -> None:
    logits, _ = data()
    assert per_codebook_ce({"logits": logits}, torch.zeros(B, K, T)) is None


def test_labels_with_pad_ids_give_hf_musicgens_own_loss() -> None:
    """A public fine-tuning script's labels (dreambooth style): the delay pattern built by the decoder
    with the pad id in its corners, left in the labels, -100 where the collator padded. HF's loss is
    the mean over codebooks of each codebook's CE with those masked; ours must be the same numbers."""
    pytest.importorskip("transformers")
    from signalchain.reference.hf.tiny import TinyConfig, tiny_model

    cfg = TinyConfig()
    model = tiny_model(0, cfg)
    model.eval()
    pad, k = model.decoder.config.pad_token_id, model.decoder.config.num_codebooks
    assert label_ignore_ids(model) == (-100, pad)
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, cfg.codebook_size, (2 * k, 12), generator=g)  # [B*K, T]
    pattern, mask = model.decoder.build_delay_pattern_mask(codes, pad, max_length=12 + k)
    pattern = model.decoder.apply_delay_pattern_mask(pattern, mask)  # the pad id where the pattern is empty
    labels = pattern.reshape(2, k, -1).transpose(1, 2).contiguous()  # [B, T', K]
    labels[1, -3:] = -100  # the collator's padding
    assert (labels == pad).any()
    ids = torch.randint(3, 10, (2, 6), generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)  # the model shifts them
    got = per_codebook_ce(out, labels, label_ignore_ids(model))
    assert got is not None and got.skipped == 0 and len(got.values) == k
    assert sum(got.values) / k == pytest.approx(float(out.loss), rel=1e-5)
    logits = out.logits.reshape(2, k, *out.logits.shape[1:])  # [B, K, T', V]
    masked = labels.masked_fill(labels == pad, -100)
    for j in range(k):
        one = torch.nn.functional.cross_entropy(logits[:, j].reshape(-1, logits.shape[-1]), masked[..., j].reshape(-1))
        assert got.values[j] == pytest.approx(float(one), rel=1e-5)
