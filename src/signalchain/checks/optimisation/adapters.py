"""Parameter-efficient fine-tuning, recognised from structure: low-rank pairs beside frozen weights.

LoRA (and its kin) trains, for a frozen weight W [out, in], two small factors A [r, in] and B [out, r]
with r below full rank, and adds B·A to W. Freezing most of the model is then the design, not a
mistake. It is recognised from what is measured, not from a library's class names: two trainable
2-D tensors that chain through a shared small dimension r (A's rows, B's columns), whose product has
the shape of a frozen weight inside the module that holds both. Names such as `lora_A`/`lora_B` are
reported beside it as evidence, never required.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...records.optimisation import ParamGrad

__all__ = ["AdapterPair", "adapter_pairs"]


@dataclass(frozen=True)
class AdapterPair:
    a: ParamGrad  # [r, in]
    b: ParamGrad  # [out, r]
    base: ParamGrad  # the frozen weight [out, in] (or [in, out]) the product adapts
    rank: int

    @property
    def values(self) -> int:
        return self.a.numel + self.b.numel


def _ancestor(x: str, y: str) -> str:
    """The innermost module holding both parameters (dotted names)."""
    out = []
    for p, q in zip(x.split(".")[:-1], y.split(".")[:-1]):
        if p != q:
            break
        out.append(p)
    return ".".join(out)


def _under(name: str, module: str) -> bool:
    return not module or name.startswith(module + ".")


def adapter_pairs(params: list[ParamGrad]) -> list[AdapterPair]:
    """Trainable low-rank pairs (A [r, in], B [out, r], r < min(in, out)) whose product B·A has the shape
    of a frozen weight inside their innermost common module; each tensor in at most one pair, the
    pair nearest in the module tree first."""
    train = [q for q in params if q.requires_grad and len(q.shape) == 2]
    frozen = [q for q in params if not q.requires_grad and len(q.shape) == 2]
    if not train or not frozen:
        return []
    candidates = []
    for a in train:
        r, n_in = a.shape
        for b in train:
            if b is a or b.shape[1] != r:
                continue
            n_out = b.shape[0]
            if r >= min(n_in, n_out):
                continue
            home = _ancestor(a.name, b.name)
            if not home:  # factors in different top-level modules adapt nothing together
                continue
            base = next((w for w in frozen if _under(w.name, home) and w.shape in ((n_out, n_in), (n_in, n_out))), None)
            if base is not None:
                candidates.append((-len(home.split(".")), a.name, b.name, AdapterPair(a, b, base, r)))
    used: set[str] = set()
    pairs = []
    for _, _, _, pair in sorted(candidates, key=lambda c: (c[0], c[1], c[2])):
        if pair.a.name in used or pair.b.name in used:
            continue
        used |= {pair.a.name, pair.b.name}
        pairs.append(pair)
    return pairs
