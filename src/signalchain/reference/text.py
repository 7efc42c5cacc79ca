"""Text side of the reference model: a word-level tokenizer and a small transformer text encoder.

MusicGen conditions on a frozen T5; here a tiny trainable encoder stands in for it. What matters for
debugging is kept: padded ids with a validity mask, an output projection to the language model's
width (AudioCraft's conditioners have one), and masked positions zeroed in the output so that a
dropped condition (all-False mask) is an all-zero embedding, like AudioCraft's null condition.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import torch
from torch import Tensor, nn

PAD_ID = 0
UNK_ID = 1
UNK_WORD = "<unk>"

_PUNCTUATION = re.compile(r"[^\w\s]")


def split_words(caption: str) -> list[str]:
    """Lower-case, strip punctuation ("lo-fi" -> "lofi"), split on whitespace."""
    return _PUNCTUATION.sub("", caption.lower()).split()


class WordTokenizer:
    """Maps captions to fixed-length id rows. Ids: 0 = pad, 1 = unknown word, words from 2."""

    def __init__(self, vocabulary: list[str], max_len: int = 24) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        words: list[str] = []
        for entry in vocabulary:
            normalised = split_words(entry)
            if len(normalised) != 1:
                raise ValueError(
                    f"vocabulary entry {entry!r} must be exactly one word after lower-casing and "
                    f"stripping punctuation, got {normalised}; split it or remove it"
                )
            words.append(normalised[0])
        duplicates = sorted(w for w, n in Counter(words).items() if n > 1)
        if duplicates:
            raise ValueError(f"vocabulary has duplicate words {duplicates}; list each word once")
        self.max_len = max_len
        self.words = words
        self._ids = {w: i + 2 for i, w in enumerate(words)}

    @classmethod
    def from_captions(
        cls, captions: Iterable[str], max_len: int = 24, min_count: int = 1
    ) -> WordTokenizer:
        """Build the vocabulary from a corpus: most frequent first, ties alphabetical."""
        counts = Counter(w for c in captions for w in split_words(c))
        kept = sorted(
            (w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w)
        )
        return cls(kept, max_len=max_len)

    @property
    def vocab_size(self) -> int:
        return len(self.words) + 2

    def encode(self, captions: list[str]) -> tuple[Tensor, Tensor]:
        """Return ids [B, max_len] (long) and mask [B, max_len] (bool, True = real word).

        Captions longer than max_len are truncated; an empty caption gives an all-False mask row.
        """
        ids = torch.full((len(captions), self.max_len), PAD_ID, dtype=torch.long)
        for row, caption in enumerate(captions):
            tokens = [self._ids.get(w, UNK_ID) for w in split_words(caption)[: self.max_len]]
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return ids, ids != PAD_ID

    def decode(self, ids: Tensor) -> list[str]:
        """Inverse of encode for in-vocabulary words: ids [B, L] -> normalised captions."""
        captions = []
        for row in ids.tolist():
            words = [UNK_WORD if i == UNK_ID else self.words[i - 2] for i in row if i != PAD_ID]
            captions.append(" ".join(words))
        return captions


class TextEncoder(nn.Module):
    """Token + position embedding -> small pre-norm TransformerEncoder -> Linear to out_dim."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        dim: int = 64,
        out_dim: int = 128,
        layers: int = 1,
        heads: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, dropout=dropout, batch_first=True, norm_first=True
        )
        # The nested-tensor fast path silently changes how fully padded rows come out; keep the
        # plain path so that masking is handled in one visible place (forward below).
        self.encoder = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False
        )
        self.proj = nn.Linear(dim, out_dim)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """ids [B, L] long, mask [B, L] bool (True = real word) -> embedding [B, L, out_dim]."""
        B, L = ids.shape
        if L > self.max_len:
            raise ValueError(f"text has {L} tokens but the encoder holds at most {self.max_len}")
        mask = mask.bool()
        positions = torch.arange(L, device=ids.device)
        x = self.tokens(ids) + self.positions(positions)  # [B, L, dim]
        # A row with no valid word would make every attention score -inf and the softmax NaN
        # (forward and backward). Let such rows attend to slot 0; their output is zeroed below.
        padding = ~mask  # [B, L], True = ignore
        empty = ~mask.any(dim=1)  # [B]
        if L > 0 and bool(empty.any()):
            padding = padding.clone()
            padding[empty, 0] = False
        h = self.encoder(x, src_key_padding_mask=padding)  # [B, L, dim]
        return self.proj(h) * mask.unsqueeze(-1).to(h.dtype)  # [B, L, out_dim], zeros where masked
