"""The HF bed: the `hf_musicgen` integration on a tiny offline MusicGen and the reference clips,
with its own fault catalogue (bugs written the way they arise in HF fine-tuning code)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from signalchain.integrations.hf_musicgen import Batch, HFMusicgenPipeline, examples_from_clips

from .tiny import TinyConfig, bed_clips, tiny_model, tiny_tokenizer

__all__ = ["HFBedConfig", "HFBedPipeline"]


@dataclass
class HFBedConfig:
    tiny: TinyConfig = field(default_factory=TinyConfig)
    examples: int = 40
    data_seed: int = 0
    batch_size: int = 4
    segment_seconds: float = 2.0
    lr: float = 3e-3
    text_lr_scale: float = 0.1
    cond_dropout: float = 0.1
    guidance_scale: float = 3.0
    amp: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_CLIPS: dict[tuple[int, int], list] = {}


class HFBedPipeline(HFMusicgenPipeline):
    """`HFMusicgenPipeline` on the tiny bed; `with_faults`/`fault_catalogue` for `signalchain faults`."""

    def __init__(self, config: HFBedConfig | None = None, faults: Sequence[str] = ()):
        self.cfg = copy.deepcopy(config) if config is not None else HFBedConfig()
        c = self.cfg
        key = (c.examples, c.data_seed)
        if key not in _CLIPS:
            _CLIPS[key] = bed_clips(c.examples, c.data_seed)
        tok = tiny_tokenizer(c.tiny.max_text_len)
        super().__init__(self._factory, tokenizer=tok, data=examples_from_clips(_CLIPS[key]), name="hf-bed",
                         batch_size=c.batch_size, segment_seconds=c.segment_seconds, lr=c.lr,
                         text_lr_scale=c.text_lr_scale, cond_dropout=c.cond_dropout,
                         guidance_scale=c.guidance_scale, max_text_len=c.tiny.max_text_len, amp=c.amp)
        self.faults: tuple[str, ...] = tuple(faults)
        if self.faults:
            from .faults import apply_faults

            apply_faults(self, self.faults)

    def _factory(self, seed: int) -> Any:
        return tiny_model(seed, self.cfg.tiny, len(self.tokenizer))

    @property
    def config(self) -> dict[str, Any]:
        return {**self.cfg.to_dict(), "faults": list(self.faults)}

    def with_faults(self, names: Sequence[str]) -> HFBedPipeline:
        return HFBedPipeline(self.cfg, tuple(self.faults) + tuple(names))

    def fault_catalogue(self) -> list[dict[str, Any]]:
        from .faults import catalogue

        return [f.to_dict() for f in catalogue()]

    def golden_batch(self, seed: int) -> Batch:
        """Like the integration's, with the last example always shorter than the crop (padding)."""
        batch = super().golden_batch(seed)
        seg = self.segment_seconds
        short = [e for e in self.split_examples("train") if e.audio.shape[-1] / e.sample_rate < seg]
        if short and all(e.audio.shape[-1] / e.sample_rate >= seg for e in batch.examples):
            batch.examples[-1] = short[seed % len(short)]
        return batch
