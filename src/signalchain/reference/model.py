"""The reference language model: a small MusicGen-style decoder over delayed codec tokens.

Per pattern step the K codebook embeddings are summed into one vector; a causal transformer with
cross-attention on the text condition runs over the steps; K linear heads give one distribution per
codebook. `compute_predictions` wraps the delay pattern so that logits line up with the codes.

Empty conditions: every cross-attention layer sees one extra, always-valid, learned "null" key/value
slot in front of the condition. A row whose condition mask is all False (a dropped caption, the
unconditional half of classifier-free guidance) then attends only to that slot, so the softmax never
runs over an empty set and no NaN can appear, forward or backward, without any data-dependent branch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .pattern import build_delay_pattern, pattern_valid_mask, revert_delay_pattern
from .text import TextEncoder


@dataclass
class ModelConfig:
    text_vocab_size: int
    n_codebooks: int = 4
    cardinality: int = 256  # codes per codebook; id `cardinality` is the special token
    dim: int = 128
    heads: int = 4
    layers: int = 3
    ffn_mult: int = 4
    dropout: float = 0.0
    max_steps: int = 512  # learned positions; pattern length T + K - 1 must fit
    text_max_len: int = 24
    text_dim: int = 64
    text_layers: int = 1

    def __post_init__(self) -> None:
        if self.dim % self.heads != 0:
            raise ValueError(f"dim={self.dim} must be divisible by heads={self.heads}")
        if self.n_codebooks < 1 or self.cardinality < 2:
            raise ValueError(
                f"need n_codebooks >= 1 and cardinality >= 2, got {self.n_codebooks}, "
                f"{self.cardinality}"
            )


class SelfAttention(nn.Module):
    """Causal multi-head self-attention: step s attends to steps <= s."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)  # [B, H, S, Dh]
        return self.out(y.transpose(1, 2).reshape(B, S, D))


class CrossAttention(nn.Module):
    """Multi-head attention from the audio steps to the condition, with a key padding mask."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, cond: Tensor, cond_mask: Tensor) -> Tensor:
        """x [B, S, D]; cond [B, L, D]; cond_mask [B, L] bool, at least one True per row."""
        B, S, D = x.shape
        L, H = cond.shape[1], self.heads
        q = self.q(x).view(B, S, H, D // H).transpose(1, 2)  # [B, H, S, Dh]
        k, v = self.kv(cond).view(B, L, 2, H, D // H).permute(2, 0, 3, 1, 4)  # [B, H, L, Dh]
        attend = cond_mask[:, None, None, :]  # [B, 1, 1, L], True = take part
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=p)
        return self.out(y.transpose(1, 2).reshape(B, S, D))


class Block(nn.Module):
    """Pre-norm: causal self-attention, cross-attention on the condition, MLP; each residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        dim = config.dim
        self.norm_self = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, config.heads, config.dropout)
        self.norm_cross = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, config.heads, config.dropout)
        self.norm_mlp = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, config.ffn_mult * dim),
            nn.GELU(),
            nn.Linear(config.ffn_mult * dim, dim),
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, cond: Tensor, cond_mask: Tensor) -> Tensor:
        x = x + self.drop(self.self_attn(self.norm_self(x)))
        x = x + self.drop(self.cross_attn(self.norm_cross(x), cond, cond_mask))
        return x + self.drop(self.mlp(self.norm_mlp(x)))


class MusicLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        K, D = config.n_codebooks, config.dim
        self.text_encoder = TextEncoder(
            config.text_vocab_size,
            config.text_max_len,
            dim=config.text_dim,
            out_dim=D,
            layers=config.text_layers,
            heads=config.heads,
            dropout=config.dropout,
        )
        # +1 row: index `cardinality` is the special token (pattern padding, start of sequence).
        self.embeddings = nn.ModuleList(nn.Embedding(config.cardinality + 1, D) for _ in range(K))
        self.positions = nn.Embedding(config.max_steps, D)
        self.null_cond = nn.Parameter(torch.zeros(1, 1, D))  # the always-valid cross-attn slot
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(D)
        self.heads = nn.ModuleList(nn.Linear(D, config.cardinality) for _ in range(K))
        self.apply(_init_weights)
        nn.init.normal_(self.null_cond, std=0.02)

    @property
    def special_token(self) -> int:
        return self.config.cardinality

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def encode_condition(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Text ids [B, L], mask [B, L] -> cond [B, L, D] (zeros where masked), cond_mask [B, L]."""
        mask = mask.bool()
        return self.text_encoder(ids, mask), mask

    def add_null_slot(self, cond: Tensor, cond_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Prepend the always-valid null slot: cond [B, 1 + L, D], cond_mask [B, 1 + L].

        So no row of the cross-attention mask is all False (see the module docstring).
        """
        B = cond.shape[0]
        cond = torch.cat([self.null_cond.expand(B, 1, -1).to(cond.dtype), cond], dim=1)
        return cond, F.pad(cond_mask.bool(), (1, 0), value=True)

    def forward(self, sequence: Tensor, cond: Tensor, cond_mask: Tensor) -> Tensor:
        """sequence [B, K, S] long in [0, cardinality] -> logits [B, K, S, cardinality].

        Causal over steps: logits at step s depend on sequence[:, :, :s + 1] only.
        """
        B, K, S = sequence.shape
        if K != self.config.n_codebooks:
            raise ValueError(f"sequence has {K} codebooks, the model has {self.config.n_codebooks}")
        if S > self.config.max_steps:
            raise ValueError(
                f"sequence has {S} steps but the model has max_steps={self.config.max_steps}; "
                f"raise ModelConfig.max_steps or use shorter clips"
            )
        x = sum(emb(sequence[:, k]) for k, emb in enumerate(self.embeddings))  # [B, S, D]
        x = self.drop(x + self.positions(torch.arange(S, device=sequence.device)))
        cond, cond_mask = self.add_null_slot(cond, cond_mask)
        for block in self.blocks:
            x = block(x, cond, cond_mask)
        x = self.norm(x)
        return torch.stack([head(x) for head in self.heads], dim=1)  # [B, K, S, card]

    def compute_predictions(
        self, codes: Tensor, cond: Tensor, cond_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """codes [B, K, T] -> logits [B, K, T, card] with logits[:, k, t] predicting codes[:, k, t],
        and mask [B, K, T] (True where the prediction is valid).
        """
        B, K, T = codes.shape
        special = self.special_token
        pattern = build_delay_pattern(codes, special)  # [B, K, S], S = T + K - 1
        # Shift right one step behind a special "start" column: step s is predicted from steps < s.
        start = pattern.new_full((B, K, 1), special)
        inputs = torch.cat([start, pattern[:, :, :-1]], dim=2)  # [B, K, S]
        logits = self(inputs, cond, cond_mask)  # [B, K, S, card], step s predicts pattern[:, :, s]
        logits = revert_delay_pattern(logits)  # [B, K, T, card]
        valid = pattern_valid_mask(K, T, device=codes.device)  # [K, S]
        # A fresh tensor, not a view: callers may edit the loss mask in place.
        mask = revert_delay_pattern(valid.unsqueeze(0)).expand(B, K, T).contiguous()  # [B, K, T]
        return logits, mask


def masked_cross_entropy(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Mean cross-entropy over valid positions, and per codebook.

    logits [B, K, T, C], targets [B, K, T], mask [B, K, T] -> (loss [], per_codebook [K]).
    An empty mask gives a loss of exactly 0 (no gradient) rather than NaN.
    """
    ce = F.cross_entropy(logits.flatten(0, 2).float(), targets.flatten(), reduction="none")
    ce = ce.view_as(targets) * mask  # [B, K, T]
    count = mask.sum(dim=(0, 2))  # [K]
    per_codebook = ce.sum(dim=(0, 2)) / count.clamp(min=1)
    return ce.sum() / mask.sum().clamp(min=1), per_codebook


def _init_weights(module: nn.Module) -> None:
    # Small weights keep the initial logits near uniform: loss starts at ~ln(cardinality).
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
