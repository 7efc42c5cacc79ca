import pytest
import torch

from signalchain.reference.text import PAD_ID, UNK_ID, TextEncoder, WordTokenizer, split_words

VOCAB = ["warm", "piano", "with", "soft", "drums", "lofi"]


def test_split_words_lowercases_and_strips_punctuation() -> None:
    assert split_words("  Warm PIANO, with lo-fi drums!\n") == [
        "warm",
        "piano",
        "with",
        "lofi",
        "drums",
    ]


def test_ids_pad_unk_and_words_from_two() -> None:
    tok = WordTokenizer(VOCAB, max_len=6)
    ids, mask = tok.encode(["warm violin"])
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    assert ids.tolist() == [[2, UNK_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert mask.tolist() == [[True, True, False, False, False, False]]
    assert tok.vocab_size == len(VOCAB) + 2


def test_round_trip() -> None:
    tok = WordTokenizer(VOCAB)
    captions = ["Warm piano, with soft drums.", "LO-FI piano", "drums"]
    ids, mask = tok.encode(captions)
    assert ids.shape == mask.shape == (3, 24)
    assert tok.decode(ids) == ["warm piano with soft drums", "lofi piano", "drums"]
    assert tok.decode(tok.encode(["warm cello"])[0]) == ["warm <unk>"]


def test_truncation_to_max_len() -> None:
    tok = WordTokenizer(VOCAB, max_len=3)
    ids, mask = tok.encode(["warm piano with soft drums"])
    assert ids.shape == (1, 3)
    assert mask.all()
    assert tok.decode(ids) == ["warm piano with"]


@pytest.mark.parametrize("caption", ["", "   ", "!?..."])
def test_empty_caption_gives_all_false_mask(caption: str) -> None:
    ids, mask = WordTokenizer(VOCAB, max_len=5).encode([caption, "piano"])
    assert not mask[0].any() and (ids[0] == PAD_ID).all()
    assert mask[1].tolist() == [True, False, False, False, False]


def test_vocabulary_errors_name_the_entry() -> None:
    with pytest.raises(ValueError, match=r"duplicate words \['piano'\]"):
        WordTokenizer(["piano", "Piano!"])
    with pytest.raises(ValueError, match="'two words' must be exactly one word"):
        WordTokenizer(["two words"])


def test_from_captions_orders_by_frequency() -> None:
    tok = WordTokenizer.from_captions(["b a", "a c", "a b"], max_len=4)
    assert tok.words == ["a", "b", "c"]


@pytest.fixture
def encoder() -> TextEncoder:
    torch.manual_seed(0)
    return TextEncoder(vocab_size=len(VOCAB) + 2, max_len=8, dim=32, out_dim=48, heads=4)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return WordTokenizer(VOCAB, max_len=8).encode(["warm piano", "", "soft drums with piano"])


def test_encoder_shape_and_zeros_where_masked(encoder: TextEncoder) -> None:
    ids, mask = _batch()
    emb = encoder(ids, mask)
    assert emb.shape == (3, 8, 48)
    assert (emb[~mask] == 0).all()
    assert (emb[mask].abs().sum(-1) > 0).all()


@pytest.mark.parametrize("train", [True, False])
def test_all_masked_row_is_finite_zero_with_finite_grads(encoder: TextEncoder, train: bool) -> None:
    ids, mask = _batch()
    encoder.train(train)
    emb = encoder(ids, mask)
    assert torch.isfinite(emb).all()
    assert (emb[1] == 0).all()
    emb.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)
    with torch.no_grad():  # the inference fast path too
        encoder.eval()
        assert torch.isfinite(encoder(ids, torch.zeros_like(mask))).all()


def test_padded_ids_do_not_leak_into_valid_positions(encoder: TextEncoder) -> None:
    ids, mask = _batch()
    other = ids.clone()
    other[~mask] = 3  # garbage under the padding
    torch.testing.assert_close(encoder(ids, mask), encoder(other, mask))
