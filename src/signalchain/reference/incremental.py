"""Incremental decoding for the reference model: a key/value cache for `generate`.

`MusicLM.forward` is causal, so the logits at step s depend on steps <= s only. Sampling step s
therefore needs only the new positions' queries against the keys and values of every position so
far: each self-attention layer keeps its keys and values (`KVCache`), the cross-attention's keys and
values of the condition are computed once per call, and a step runs the decoder over the positions
added since the last step (one, after the first). The arithmetic is the full forward's, position by
position, through the same submodules; only the float rounding of the batched matrix products may
differ (a few ulps), which `tests/reference/test_generate_cache.py` holds to identical tokens.

The cache reimplements the decoder's forward, so it is used only on a *plain* `MusicLM`
(`cache_applies`): a model whose forward or any decoder submodule's forward was replaced, that carries
a forward hook (a logits processor, a position offset, a probe) or a global module hook, a subclass,
a wrapper (`torch.compile`), or a submodule of a type the cache does not know, runs the full forward
each step instead, exactly as before, so whatever it does to the forward still happens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .model import Block, CrossAttention, MusicLM, SelfAttention

#: The decoder's module types and the forward each had when this module was imported: a fault or a
#: user that swaps a class's forward makes the model not plain.
_KNOWN = (MusicLM, Block, SelfAttention, CrossAttention, nn.Linear, nn.Embedding, nn.LayerNorm, nn.Dropout,
          nn.GELU, nn.Sequential, nn.ModuleList)
_FORWARDS = {cls: cls.forward for cls in _KNOWN}
#: The MusicLM methods the cached step calls besides the submodules' forwards.
_METHODS = ("add_null_slot",)


def cache_applies(model: nn.Module) -> bool:
    """True when `model` is a plain MusicLM whose decoder the cached step reproduces exactly."""
    if type(model) is not MusicLM:
        return False
    mod = nn.modules.module
    if any(getattr(mod, name, None) for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                                                  "_global_backward_hooks", "_global_backward_pre_hooks")):
        return False
    if any(callable(vars(model).get(name)) for name in _METHODS):
        return False
    for name, m in model.named_modules():
        if name == "text_encoder" or name.startswith("text_encoder."):
            continue  # the condition is encoded before sampling, outside the loop
        cls = type(m)
        if _FORWARDS.get(cls) is not cls.forward or "forward" in vars(m):
            return False
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return False
    return True


class KVCache:
    """Per layer: the self-attention keys and values of the positions decoded so far (in buffers of
    `steps` positions), and the cross-attention keys and values of the condition (fixed per call)."""

    def __init__(self, model: MusicLM, cond: Tensor, cond_mask: Tensor, steps: int) -> None:
        cond, cond_mask = model.add_null_slot(cond, cond_mask)
        B, L, D = cond.shape
        self.attend = cond_mask[:, None, None, :]  # [B, 1, 1, 1 + L], True = take part
        self.cross: list[tuple[Tensor, Tensor]] = []
        for block in model.blocks:
            H = block.cross_attn.heads
            k, v = block.cross_attn.kv(cond).view(B, L, 2, H, D // H).permute(2, 0, 3, 1, 4)  # [B, H, L, Dh]
            self.cross.append((k, v))
        self.batch, self.steps = B, steps
        self.keys: list[Tensor | None] = [None] * len(model.blocks)
        self.values: list[Tensor | None] = [None] * len(model.blocks)
        self.length = 0  # positions already in the cache

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v [B, H, n, Dh] of positions length .. length + n -> every position's so far."""
        if self.keys[layer] is None:
            B, H, _, Dh = k.shape
            self.keys[layer] = k.new_empty(B, H, self.steps, Dh)
            self.values[layer] = v.new_empty(B, H, self.steps, Dh)
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None
        end = self.length + k.shape[2]
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        return keys[:, :, :end], values[:, :, :end]


def _self_attention(attn: SelfAttention, x: Tensor, cache: KVCache, layer: int) -> Tensor:
    B, n, D = x.shape
    q, k, v = attn.qkv(x).view(B, n, 3, attn.heads, D // attn.heads).permute(2, 0, 3, 1, 4)
    start = cache.length
    k, v = cache.append(layer, k, v)  # [B, H, start + n, Dh]
    if n == 1:  # the newest position sees every earlier one: no mask
        y = F.scaled_dot_product_attention(q, k, v)
    elif start == 0:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # several new positions after cached ones: causal with an offset
        visible = torch.arange(start + n, device=x.device)[None, :] <= torch.arange(start, start + n,
                                                                                    device=x.device)[:, None]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
    return attn.out(y.transpose(1, 2).reshape(B, n, D))


def _cross_attention(attn: CrossAttention, x: Tensor, cache: KVCache, layer: int) -> Tensor:
    B, n, D = x.shape
    q = attn.q(x).view(B, n, attn.heads, D // attn.heads).transpose(1, 2)  # [B, H, n, Dh]
    k, v = cache.cross[layer]
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=cache.attend)
    return attn.out(y.transpose(1, 2).reshape(B, n, D))


def forward_cached(model: MusicLM, sequence: Tensor, cache: KVCache) -> Tensor:
    """sequence [B, K, n]: the inputs at positions cache.length .. + n -> logits [B, K, n, card], as
    `model(inputs)[:, :, cache.length:]` would give them; the cache then holds those positions too."""
    B, K, n = sequence.shape
    start = cache.length
    if start + n > cache.steps:
        raise ValueError(f"the cache holds {cache.steps} positions; {start} + {n} asked")
    x = sum(emb(sequence[:, k]) for k, emb in enumerate(model.embeddings))  # [B, n, D]
    x = model.drop(x + model.positions(torch.arange(start, start + n, device=sequence.device)))
    for i, block in enumerate(model.blocks):
        x = x + block.drop(_self_attention(block.self_attn, block.norm_self(x), cache, i))
        x = x + block.drop(_cross_attention(block.cross_attn, block.norm_cross(x), cache, i))
        x = x + block.drop(block.mlp(block.norm_mlp(x)))
    cache.length = start + n
    x = model.norm(x)
    return torch.stack([head(x) for head in model.heads], dim=1)  # [B, K, n, card]
