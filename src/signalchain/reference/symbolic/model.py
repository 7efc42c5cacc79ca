"""The symbolic bed's model: a tiny decoder-only transformer over REMI ids, conditioned on the caption.

caption -> word ids (a small offline vocabulary built from the bed's captions) -> word embeddings
-> one encoder layer -> memory, with a learnt null token always in front (a dropped caption leaves
only it) -> cross-attention in each decoder layer. Logits at position t predict token t + 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

__all__ = ["WordVocab", "SymConfig", "SymbolicLM", "next_token_loss", "IGNORE"]

IGNORE = -100


class WordVocab:
    """Caption -> word ids [B, L] and mask [B, L] (True on words); 0 is pad, 1 unknown."""

    def __init__(self, captions: Sequence[str], max_len: int = 20):
        words = sorted({w for c in captions for w in self.words(c)})
        self.index = {w: i + 2 for i, w in enumerate(words)}
        self.max_len = max_len

    @staticmethod
    def words(caption: str) -> list[str]:
        return re.findall(r"[a-z]+|\d+/\d+|\d+", caption.lower())

    @property
    def vocab_size(self) -> int:
        return len(self.index) + 2

    def encode(self, captions: Sequence[str]) -> tuple[Tensor, Tensor]:
        ids = torch.zeros(len(captions), self.max_len, dtype=torch.long)
        for row, caption in enumerate(captions):
            w = [self.index.get(x, 1) for x in self.words(caption)][: self.max_len]
            ids[row, : len(w)] = torch.tensor(w, dtype=torch.long)
        return ids, ids != 0


@dataclass
class SymConfig:
    vocab_size: int
    word_vocab_size: int
    max_len: int = 256
    word_max_len: int = 20
    dim: int = 64
    heads: int = 4
    layers: int = 2
    ffn_mult: int = 4

    def to_dict(self) -> dict:
        return asdict(self)


class SymbolicLM(nn.Module):
    def __init__(self, config: SymConfig):
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.dim)
        self.pos_emb = nn.Embedding(c.max_len, c.dim)
        self.word_emb = nn.Embedding(c.word_vocab_size, c.dim, padding_idx=0)
        self.word_pos = nn.Embedding(c.word_max_len, c.dim)
        self.text_encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(c.dim, c.heads, c.ffn_mult * c.dim, dropout=0.0, batch_first=True,
                                       norm_first=True), 1, enable_nested_tensor=False)
        self.null_cond = nn.Parameter(torch.randn(1, 1, c.dim) * 0.02)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(c.dim, c.heads, c.ffn_mult * c.dim, dropout=0.0, batch_first=True,
                                       norm_first=True), c.layers)
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab_size)

    def encode_condition(self, word_ids: Tensor, word_mask: Tensor) -> tuple[Tensor, Tensor]:
        """-> memory [B, 1 + L, D] and its mask [B, 1 + L] (True where attended; the null token always)."""
        B, L = word_ids.shape
        x = self.word_emb(word_ids) + self.word_pos(torch.arange(L, device=word_ids.device))
        any_word = word_mask.any(dim=1, keepdim=True)
        safe = word_mask | ~any_word  # an empty caption: encode over its pads, then ignore them all below
        x = self.text_encoder(x, src_key_padding_mask=~safe)
        memory = torch.cat([self.null_cond.expand(B, 1, -1), x], dim=1)
        mask = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=word_ids.device), word_mask], dim=1)
        return memory, mask

    def forward(self, ids: Tensor, padding: Tensor | None, memory: Tensor, memory_mask: Tensor) -> Tensor:
        """ids [B, T], padding [B, T] (True on real tokens) -> logits [B, T, V]."""
        B, T = ids.shape
        if T > self.config.max_len:
            raise ValueError(f"a sequence of {T} tokens is longer than the model's max_len={self.config.max_len}")
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T, device=ids.device))
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=ids.device, dtype=x.dtype)
        pad = None if padding is None else torch.zeros(B, T, dtype=x.dtype, device=ids.device).masked_fill(
            ~padding, float("-inf"))
        mem_pad = torch.zeros(memory_mask.shape, dtype=x.dtype, device=ids.device).masked_fill(~memory_mask,
                                                                                            float("-inf"))
        h = self.decoder(x, memory, tgt_mask=causal, tgt_key_padding_mask=pad, memory_key_padding_mask=mem_pad,
                         tgt_is_causal=True)
        return self.head(self.norm(h))


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose target is not IGNORE."""
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                                       ignore_index=IGNORE)
