"""A bounded cache of codec codes keyed by content: the audio's bytes and the codec's state.

Encoding the same crops with the same frozen codec gives the same codes, so a second encode of
identical inputs can be served from memory. The key is what decides the codes: the audio's bytes,
shape, dtype and device; the codec's every parameter and buffer (name, dtype, shape, bytes: a
fault or a user that trains, loads or edits the codec, even through `.data`, changes it); the
codec's class and config; and the caller's own settings (bandwidth, channel layout, sample rate).
Its modules' names, classes and settings (`extra_repr`: strides, paddings…) are in the key too.
A hit returns a copy of the codes the codec gave for that key, so it is bit-identical to recomputing.

It steps aside (computes, neither reads nor stores) whenever skipping the codec could change more
than the time taken:
- a codec parameter requires grad (the codec is being trained);
- the codec is in training mode and a module in it behaves differently there (dropout, batch or
  instance statistics, recurrent or attention dropout, or a class outside torch whose code reads
  `.training`); HF's Encodec has none, so `model.train()` alone does not disable the cache;
- something watches the codec run: a forward hook on one of its modules or a global module hook,
  a Python dispatch or function mode (signalchain's non-finite watch, host-read and graph probes),
  the PyTorch profiler (the profile family measures the step a training run pays for: fresh crops
  every step, never these replays), autocast, or torch.compile tracing;
- the audio or the codec is a tensor subclass, or a codec module has a method replaced on the
  instance (`codec.encode = …`: code the key cannot see).
A miss also checks that the encode drew nothing from torch's global RNG and left the codec's state
as it found it; a codec that does either is never cached again (its result is not a function of
the key). Memory is bounded: least recently used entries go past `max_entries` or `max_bytes`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module

__all__ = ["CodesCache", "tensor_digest", "state_digest", "mode_sensitive"]

#: torch modules whose forward depends on `training`, and when (their settings).
_TORCH_MODE: tuple[tuple[type, Callable[[Any], bool]], ...] = (
    (torch.nn.modules.dropout._DropoutNd, lambda m: m.p > 0),
    (torch.nn.modules.batchnorm._NormBase, lambda m: True),  # batch statistics and running-stat updates
    (torch.nn.modules.rnn.RNNBase, lambda m: m.dropout > 0),
    (torch.nn.MultiheadAttention, lambda m: m.dropout > 0),
    (torch.nn.RReLU, lambda m: True),
    (torch.nn.TransformerEncoderLayer, lambda m: True),
    (torch.nn.TransformerDecoderLayer, lambda m: True),
)
_CLASS_READS_TRAINING: dict[type, bool] = {}


def _class_reads_training(cls: type) -> bool:
    """Whether the methods a class (or a base from its own source file) defines read `.training`;
    True where the source cannot be read. Generic bases from other files (HF's PreTrainedModel,
    its PEFT mixin) read it only for gradient checkpointing and adapters, not for outputs."""
    if cls not in _CLASS_READS_TRAINING:
        reads = False
        for klass in cls.__mro__:
            if klass.__module__ != cls.__module__:
                continue
            for fn in vars(klass).values():
                fn = getattr(fn, "__func__", fn)
                if not inspect.isfunction(fn):
                    continue
                try:
                    reads = reads or ".training" in inspect.getsource(fn)
                except (OSError, TypeError):
                    reads = True
        _CLASS_READS_TRAINING[cls] = reads
    return _CLASS_READS_TRAINING[cls]


_TORCH_MODE_TYPES = tuple(t for t, _ in _TORCH_MODE)


def _sensitive(m: torch.nn.Module) -> bool:
    if isinstance(m, _TORCH_MODE_TYPES) and any(isinstance(m, t) and when(m) for t, when in _TORCH_MODE):
        return True
    return not type(m).__module__.startswith("torch.") and _class_reads_training(type(m))


def mode_sensitive(codec: torch.nn.Module) -> bool:
    """Whether some module of `codec` computes differently in training mode (see the module doc)."""
    return any(_sensitive(m) for m in codec.modules())


class _Survey:
    """One walk over the codec's modules: its tensors (named), whether a hook watches it, whether
    a parameter is trained, and whether training mode changes what it computes."""

    def __init__(self, codec: torch.nn.Module):
        self.tensors: list[tuple[str, torch.Tensor]] = []
        self.structure: list[str] = []  # each module's name, class and settings (stride, padding, alpha…)
        self.hooked = self.trained = self.sensitive = self.patched = False
        for name, m in codec.named_modules(remove_duplicate=False):
            cls = type(m)
            self.structure.append(f"{name}:{cls.__module__}.{cls.__qualname__}({m.extra_repr()})")
            self.hooked = self.hooked or bool(m._forward_hooks or m._forward_pre_hooks)
            self.sensitive = self.sensitive or (m.training and _sensitive(m))
            # a method replaced on the instance (`codec.encode = …`): code the key cannot see
            self.patched = self.patched or any(callable(v) and not isinstance(v, type) for v in vars(m).values())
            for kind, table in (("p", m._parameters), ("b", m._buffers)):
                for key, t in table.items():
                    if t is not None:
                        self.tensors.append((f"{kind}|{name}.{key}", t))
                        self.trained = self.trained or t.requires_grad or type(t) not in _PLAIN

    def digest(self, codec: torch.nn.Module) -> str:
        """sha256 of the codec's class, config and every parameter and buffer (names, dtypes, shapes, bytes)."""
        h = hashlib.sha256(f"{type(codec).__module__}.{type(codec).__qualname__}".encode())
        config = getattr(codec, "config", None)
        if config is not None and hasattr(config, "to_json_string"):
            h.update(config.to_json_string().encode())
        h.update(";".join(self.structure).encode())
        h.update(";".join(f"{n}|{t.dtype}|{tuple(t.shape)}" for n, t in self.tensors).encode())
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for _, t in self.tensors:  # one flat copy per device and dtype: one call, not one per tensor
            groups.setdefault((t.device, t.dtype), []).append(t.detach())
        for group in groups.values():
            h.update(_bytes(torch._C._nn.flatten_dense_tensors(group)))
        return h.hexdigest()


_PLAIN = (torch.nn.Parameter, torch.Tensor, torch.nn.parameter.Buffer)


def _bytes(t: torch.Tensor) -> Any:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    try:
        return t.numpy().data if t.dim() else t.reshape(1).numpy().data
    except TypeError:  # a dtype numpy lacks (bfloat16, float8): its raw bytes
        return t.reshape(-1).view(torch.uint8).numpy().data


def tensor_digest(t: torch.Tensor) -> str:
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|{t.device}".encode())
    h.update(_bytes(t))
    return h.hexdigest()


def state_digest(codec: torch.nn.Module) -> str:
    return _Survey(codec).digest(codec)


def _watched(survey: _Survey) -> bool:
    if survey.hooked or _module._global_forward_hooks or _module._global_forward_pre_hooks:
        return True
    return bool(torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
                or torch._C._autograd._profiler_enabled() or torch.compiler.is_compiling())


def _rng_states(devices: set[torch.device]) -> list[torch.Tensor]:
    return [torch.random.get_rng_state()] + [torch.cuda.get_rng_state(d) for d in devices if d.type == "cuda"]


class CodesCache:
    """LRU of codes by content key (see the module doc); `hits`, `misses`, `bypassed` count calls."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 64 << 20):
        self.max_entries, self.max_bytes = int(max_entries), int(max_bytes)
        self._entries: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self._bytes = 0
        # ids of codecs seen drawing random numbers or changing their state: a reused id only bypasses
        self._volatile: set[int] = set()
        self.hits = self.misses = self.bypassed = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _survey(self, codec: torch.nn.Module, audio: torch.Tensor) -> _Survey | None:
        """The codec's survey when a lookup may stand in for running it now, else None (module doc)."""
        if self.max_entries <= 0 or id(codec) in self._volatile:
            return None
        if type(audio) is not torch.Tensor or audio.requires_grad or torch.is_autocast_enabled(audio.device.type):
            return None
        survey = _Survey(codec)
        if survey.trained or survey.sensitive or survey.patched or _watched(survey):
            return None
        return survey

    def usable(self, codec: torch.nn.Module, audio: torch.Tensor) -> bool:
        return self._survey(codec, audio) is not None

    def encode(self, codec: torch.nn.Module, audio: torch.Tensor, settings: tuple,
               compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """`compute()`'s codes for `audio`, from the cache when an identical encode was seen."""
        survey = self._survey(codec, audio)
        if survey is None:
            self.bypassed += 1
            return compute()
        state = survey.digest(codec)
        key = (tensor_digest(audio), state, settings)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit.clone()
        self.misses += 1
        devices = {audio.device} | {t.device for _, t in survey.tensors}
        rng = _rng_states(devices)
        codes = compute()
        drew = any(not torch.equal(a, b) for a, b in zip(rng, _rng_states(devices)))
        if drew or state_digest(codec) != state:  # not a function of the key: never cache this codec
            self._volatile.add(id(codec))
            return codes
        self._store(key, codes.detach().clone())
        return codes

    def _store(self, key: tuple, codes: torch.Tensor) -> None:
        size = codes.numel() * codes.element_size()
        if size > self.max_bytes:
            return
        self._entries[key] = codes
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.numel() * old.element_size()
