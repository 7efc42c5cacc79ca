"""The reference text-to-music pipeline: a tiny, faithful MusicGen-style training step with taps.

    clips (32 kHz, mono/stereo, 3-8 s) + captions
      -> batch [B, 2, T] -> resample 16 kHz -> mono -> random 3 s crop (zero-padded)
      -> codec tokens [B, K, F] (+ padding mask) -> delay pattern
      -> caption dropout (classifier-free) -> word tokens -> text encoder -> condition [B, L, D]
      -> causal transformer with cross-attention -> logits [B, K, F, card]
      -> per-codebook cross-entropy on valid positions (padding mask ∧ pattern mask)

It uses signalchain only through its public API (`StepOutput`, the `tap` it is handed), exactly as
a user's codebase would. Each stage is a method so that the fault catalogue can replace one the way
a real bug would change it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from signalchain import StepOutput

from . import prep
from .codec import Codec, default_codec
from .config import RefConfig
from .data import Clip, caption_vocabulary, generate_clip, prerender, rendered_clip
from .model import ModelConfig, MusicLM, masked_cross_entropy
from .output import OutputRoute, Tap, _no_tap
from .pattern import build_delay_pattern
from .text import WordTokenizer

__all__ = ["Batch", "ReferencePipeline"]


@dataclass
class Batch:
    """What the loader yields: clips at their stored rate, their captions and metadata."""

    clips: list[np.ndarray]  # [C_i, T_i] float32, C_i in {1, 2}
    sample_rate: int
    captions: list[str]
    metadata: list[dict[str, Any]]
    seed: int  # seeds the crop positions and the condition dropout of this batch

    def __len__(self) -> int:
        return len(self.clips)


class ReferencePipeline(OutputRoute):
    """Implements the `Pipeline` protocol (`signalchain.pipeline`) with every optional capability."""

    name = "reference"

    def __init__(self, config: RefConfig | None = None, faults: Sequence[str] = ()):
        self.cfg = copy.deepcopy(config) if config is not None else RefConfig()
        self.faults: tuple[str, ...] = tuple(faults)
        self.codec: Codec = default_codec()
        self.tokenizer = WordTokenizer(caption_vocabulary(), max_len=self.cfg.text_max_len)
        self._schedulers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._scalers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._clip_cache: dict[tuple[int, int], Clip] = {}
        self._last_scaler: Any = None
        self._token_cache: dict[str, np.ndarray] = {}
        if self.faults:
            from .faults import apply_faults

            apply_faults(self, self.faults)

    # ---- identity -------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        return {**self.cfg.to_dict(), "faults": list(self.faults)}

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.amp or "")

    def with_faults(self, names: Sequence[str]) -> ReferencePipeline:
        return ReferencePipeline(self.cfg, tuple(self.faults) + tuple(names))

    def fault_catalogue(self) -> list[dict[str, Any]]:
        from .faults import catalogue

        return [f.to_dict() for f in catalogue()]

    # ---- data -----------------------------------------------------------------------------------

    def clip(self, index: int, seed: int = 0) -> Clip:
        key = (index, seed)
        if key not in self._clip_cache:
            self._clip_cache[key] = rendered_clip(index, seed, self.cfg.source_sample_rate)
        return self._clip_cache[key]

    def make_batch(self, indices: Sequence[int], seed: int, data_seed: int = 0) -> Batch:
        clips = [self.clip(i, data_seed) for i in indices]
        return Batch([c.audio for c in clips], self.cfg.source_sample_rate, [c.caption for c in clips],
                     [dict(c.metadata) for c in clips], seed)

    def golden_batch(self, seed: int) -> Batch:
        """Clips of collection `seed`: fixed for a seed, different across seeds.

        The last clip is always shorter than the crop, so that padding and its mask are exercised.
        """
        batch = self.make_batch(range(self.cfg.batch_size - 1), seed=seed, data_seed=seed)
        short_seconds = 0.6 * self.cfg.segment_seconds + 0.05 * (seed % 5)
        short = generate_clip(self.cfg.batch_size - 1, seed, self.cfg.source_sample_rate, seconds=short_seconds)
        batch.clips.append(short.audio)
        batch.captions.append(short.caption)
        batch.metadata.append(dict(short.metadata))
        return batch

    def split_indices(self, split: str) -> range:
        n_train, n_valid = self.cfg.train_size, self.cfg.valid_size
        if split == "train":
            return range(0, n_train)
        if split in ("valid", "validation"):
            return range(n_train, n_train + n_valid)
        raise ValueError(f"unknown split {split!r}; the reference pipeline has 'train' and 'valid'")

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[Batch]:
        """Shuffled batches of a split, forever (one epoch after another)."""
        indices = np.array(self.split_indices(split))
        rng = np.random.default_rng(seed)
        epoch = 0
        while True:
            order = rng.permutation(indices)
            for start in range(0, len(order) - self.cfg.batch_size + 1, self.cfg.batch_size):
                yield self.make_batch(order[start : start + self.cfg.batch_size].tolist(),
                                      seed=int(rng.integers(2**31)) + epoch)
            epoch += 1

    def splits(self) -> dict[str, list[Clip]]:
        prerender([i for s in ("train", "valid") for i in self.split_indices(s)], 0, self.cfg.source_sample_rate)
        return {s: [self.clip(i) for i in self.split_indices(s)] for s in ("train", "valid")}

    def training_examples(self) -> list[Clip]:
        prerender(self.split_indices("train"), 0, self.cfg.source_sample_rate)
        return [self.clip(i) for i in self.split_indices("train")]

    def with_captions(self, batch: Batch, captions: Sequence[str]) -> Batch:
        if len(captions) != len(batch):
            raise ValueError(f"{len(captions)} captions for a batch of {len(batch)}")
        return replace(batch, captions=list(captions))

    # ---- model and optimiser -------------------------------------------------------------------

    def model_config(self) -> ModelConfig:
        c = self.cfg
        return ModelConfig(text_vocab_size=self.tokenizer.vocab_size, n_codebooks=self.codec.n_codebooks,
                           cardinality=self.codec.cardinality, dim=c.dim, heads=c.heads, layers=c.layers,
                           ffn_mult=c.ffn_mult, dropout=c.dropout, text_max_len=c.text_max_len)

    def build_model(self, seed: int) -> MusicLM:
        torch.manual_seed(seed)
        model = MusicLM(self.model_config())
        if self.cfg.compile:
            # In place (`nn.Module.compile`), so that `model(...)` inside `compute_predictions` runs compiled
            # and the model keeps its class and methods.
            model.compile(backend=self.cfg.compile, dynamic=self.cfg.compile_dynamic)
        return model

    def param_groups(self, model: MusicLM) -> list[dict[str, Any]]:
        """Weight decay on matrices only, as usual for transformers."""
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def build_optimizer(self, model: MusicLM) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(self.param_groups(model), lr=self.cfg.lr, betas=self.cfg.betas)
        warmup = max(1, self.cfg.warmup_steps)
        self._schedulers[opt] = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
        if self.cfg.amp == "fp16":
            self._scalers[opt] = self._last_scaler = torch.amp.GradScaler("cpu")
        return opt

    def scheduler_for(self, optimizer: torch.optim.Optimizer) -> Any:
        return self._schedulers.get(optimizer)

    def scaler_for(self, optimizer: torch.optim.Optimizer) -> Any:
        return self._scalers.get(optimizer)

    def condition_parameters(self, model: MusicLM) -> list[torch.nn.Parameter]:
        params = list(model.text_encoder.parameters()) + [model.null_cond]
        for block in model.blocks:
            params += list(block.cross_attn.parameters()) + list(block.norm_cross.parameters())
        return params

    # ---- the training step ----------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        dtype = self.amp_dtype
        return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def prepare_audio(self, batch: Batch, tap: Tap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stages 1-6: original, caption, metadata, resampled, mono, crop, cropped audio."""
        sr = self.cfg.sample_rate
        audio, lengths = prep.collate(self.load_clips(batch))
        tap("audio.original", audio, sample_rate=batch.sample_rate, lengths=lengths,
            channels=[int(c.shape[0]) for c in batch.clips])
        tap("caption", list(batch.captions))
        tap("metadata", list(batch.metadata))
        audio, lengths = self.resample(audio, lengths, batch.sample_rate, sr)
        tap("audio.resampled", audio, sample_rate=sr, lengths=lengths)
        mono = self.normalize(self.to_mono(audio), lengths)
        tap("audio.mono", mono, sample_rate=sr, lengths=lengths)
        segment = int(round(self.cfg.segment_seconds * sr))
        bounds = self.choose_crops(lengths, segment, np.random.default_rng([batch.seed, 1]))
        tap("crop", bounds, sample_rate=sr, lengths=lengths)
        cropped, valid = self.apply_crops(mono, bounds, lengths)
        tap("audio.cropped", cropped, sample_rate=sr, lengths=valid)
        return cropped, valid, bounds

    # Replaceable pieces of the data path (the fault catalogue swaps them for buggy versions).
    def load_clips(self, batch: Batch) -> list[np.ndarray]:
        """Decode the batch's audio (the clips are already in memory here)."""
        return list(batch.clips)

    def normalize(self, audio: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """No loudness normalisation in the clean pipeline (MusicGen trains on audio as it is)."""
        return audio

    def resample(
        self, audio: np.ndarray, lengths: np.ndarray, sr_in: int, sr_out: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return prep.resample(audio, lengths, sr_in, sr_out)

    def to_mono(self, audio: np.ndarray) -> np.ndarray:
        return prep.to_mono(audio)

    def choose_crops(self, lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        return prep.choose_crops(lengths, segment, rng)

    def apply_crops(self, audio: np.ndarray, bounds: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return prep.apply_crops(audio, bounds, lengths)

    def encode_tokens(self, cropped: np.ndarray) -> torch.Tensor:
        """Codec tokens [B, K, F] int64, memoised by the exact bytes of the audio (never stale)."""
        key = hashlib.sha1(np.ascontiguousarray(cropped).tobytes()).hexdigest()
        codes = self._token_cache.get(key)
        if codes is None:
            codes = self.codec.encode(cropped)
            if len(self._token_cache) >= 64:
                self._token_cache.pop(next(iter(self._token_cache)))
            self._token_cache[key] = codes
        return torch.from_numpy(codes.copy())

    def padding_mask(self, valid: np.ndarray, frames: int) -> torch.Tensor:
        return torch.from_numpy(prep.padding_mask(valid, self.codec.hop, frames))  # [B, F]

    def drop_conditions(self, captions: list[str], rng: np.random.Generator) -> tuple[list[str], torch.Tensor]:
        """Classifier-free dropout: each caption is replaced by the empty (null) one with prob p."""
        dropped = rng.random(len(captions)) < self.cfg.cond_dropout
        return ["" if d else c for c, d in zip(captions, dropped)], torch.from_numpy(dropped)

    def condition(self, model: MusicLM, batch: Batch, tap: Tap) -> tuple[torch.Tensor, torch.Tensor]:
        """Stages 7-8: dropout, tokenised condition, condition embedding."""
        captions, dropped = self.drop_conditions(list(batch.captions), np.random.default_rng([batch.seed, 2]))
        tap("condition.dropped", dropped, rate=self.cfg.cond_dropout)
        ids, mask = self.tokenizer.encode(captions)
        tap("condition.tokens", ids, max_len=self.tokenizer.max_len, vocab_size=self.tokenizer.vocab_size)
        tap("condition.mask", mask)
        cond, cond_mask = model.encode_condition(ids, mask)
        tap("condition.embedding", cond)
        return cond, cond_mask

    def targets_from(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens

    def loss_mask(self, padding: torch.Tensor, pattern_mask: torch.Tensor) -> torch.Tensor:
        return pattern_mask & padding[:, None, :]  # [B, K, F]

    def compute_loss(
        self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return masked_cross_entropy(logits, targets, mask)

    def step(self, model: MusicLM, batch: Batch, tap: Tap = _no_tap) -> StepOutput:
        cropped, valid, _ = self.prepare_audio(batch, tap)
        tokens = self.encode_tokens(cropped)
        tap("tokens", tokens, cardinality=self.codec.cardinality, frame_rate=self.codec.frame_rate)
        tap("tokens.pattern", build_delay_pattern(tokens, self.codec.cardinality), special=self.codec.cardinality)
        padding = self.padding_mask(valid, tokens.shape[-1])
        tap("mask.padding", padding)
        with self.autocast():
            cond, cond_mask = self.condition(model, batch, tap)
            logits, pattern_mask = model.compute_predictions(tokens, cond, cond_mask)
        targets = self.targets_from(tokens)
        tap("targets", targets, cardinality=self.codec.cardinality)
        tap("logits", logits)
        mask = self.loss_mask(padding, pattern_mask)
        tap("mask.loss", mask)
        loss, per_codebook = self.compute_loss(logits, targets, mask)
        tap("loss", loss)
        tap("loss.per_codebook", per_codebook)
        return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask,
                          extras={"per_codebook": per_codebook, "padding_mask": padding})

    def train_step(
        self, model: MusicLM, optimizer: torch.optim.Optimizer, batch: Batch, tap: Tap = _no_tap
    ) -> StepOutput:
        """One full update as the reference run does it: backward, unscale, clip, step, schedule."""
        model.train()
        out = self.step(model, batch, tap)
        scaler = self.scaler_for(optimizer)
        (scaler.scale(out.loss) if scaler else out.loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
            tap("amp.scale", scaler.get_scale())
        else:
            optimizer.step()
        scheduler = self.scheduler_for(optimizer)
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out

    @property
    def scaler(self) -> Any:
        """The GradScaler of the most recently built optimizer when the run trains in fp16, else None."""
        return self._last_scaler
