"""A `Pipeline` from a Hugging Face `MusicgenForConditionalGeneration`, its tokenizer and data.

It trains the way HF's own fine-tuning scripts do: the codec (Encodec) frozen and used to encode
crops under `no_grad`, labels `[B, T', K]` in the decoder's delay pattern with -100 where ignored,
decoder inputs made by the model from the labels (shifted behind the start token), the loss the
model computes itself, classifier-free caption dropout, and `guidance_scale` at generation only.
Every boundary is tapped with the stage names of docs/taps.md, in HF's own layouts (logits `[B*K, T', V]`).

    pipe = HFMusicgenPipeline.from_pretrained("MODEL_DIR", data="data/train")   # a save_pretrained folder
    pipe = HFMusicgenPipeline(model_or_factory_or_config, tokenizer=tok, data="data/train")
    signalchain doctor --hf-musicgen MODEL_DIR --data DATA
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...audio.resample import resample
from ...pipeline import StepOutput
from .codes_cache import CodesCache
from .data import Batch, Example, examples_from_clips, examples_from_dataset, read_examples
from .generation import HFGeneration, _no_tap
from .labels import delayed_codes, interleave_channels, labels_from_pattern, model_delays

__all__ = ["Batch", "HFMusicgenPipeline"]

Tap = Callable[..., Any]


class HFMusicgenPipeline(HFGeneration):
    """Implements the `Pipeline` protocol (`signalchain.pipeline`) with every optional capability."""

    def __init__(self, model: Any, tokenizer: Any = None, data: Any = None, *, processor: Any = None,
                 name: str = "hf-musicgen", batch_size: int = 4, segment_seconds: float | None = None,
                 lr: float = 1e-4, text_lr_scale: float = 0.1, weight_decay: float = 0.0, betas=(0.9, 0.99),
                 cond_dropout: float = 0.1, guidance_scale: float = 3.0, max_text_len: int | None = None,
                 clip_grad: float = 1.0, train_text_encoder: bool = True, amp: str | None = None,
                 valid_every: int = 5, caption_column: str | None = None, cache_codes: int = 256):
        self.name = name
        self._model_source = model
        self.processor = processor
        self.tokenizer = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", processor)
        if self.tokenizer is None:
            raise ValueError("HFMusicgenPipeline needs a tokenizer or a processor for the captions; for a "
                             "save_pretrained folder, HFMusicgenPipeline.from_pretrained(folder, data=...) finds the "
                             "processor or tokenizer saved beside the model")
        self.batch_size, self.lr, self.text_lr_scale = batch_size, lr, text_lr_scale
        self.weight_decay, self.betas, self.clip_grad = weight_decay, tuple(betas), clip_grad
        self.cond_dropout, self.guidance_scale = cond_dropout, guidance_scale
        self.train_text_encoder, self.amp = train_text_encoder, amp
        limit = getattr(self.tokenizer, "model_max_length", None)
        self.max_text_len = max_text_len or (int(limit) if limit and limit < 100_000 else 256)
        self.examples = self._examples(data, caption_column, valid_every)
        self.data_problems: list[Any] = getattr(self, "data_problems", [])
        probe = self._instantiate(0)
        self.codec_rate = int(probe.config.audio_encoder.sampling_rate)
        self.codec_channels = int(getattr(probe.config.audio_encoder, "audio_channels", 1) or 1)
        self.audio_channels = int(getattr(probe.config.decoder, "audio_channels", 1) or 1)
        self.num_codebooks = int(probe.decoder.num_codebooks)
        self.cardinality = int(probe.config.decoder.vocab_size)
        self.pad_token_id = int(probe.config.decoder.pad_token_id)
        self.hop = int(np.prod(probe.config.audio_encoder.upsampling_ratios))
        self.frame_rate = self.codec_rate / self.hop
        self.bandwidth = self._bandwidth(probe)
        longest = max(e.audio.shape[-1] / e.sample_rate for e in self.examples)
        self.segment_seconds = float(segment_seconds or min(10.0, longest))
        self._scalers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._last_model: Any = None
        self._last_scaler: Any = None
        self.codes_cache = CodesCache(max_entries=cache_codes)
        del probe

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, data: Any, **settings: Any) -> HFMusicgenPipeline:
        """The pipeline of a `save_pretrained` folder: the model and the processor (or tokenizer) saved beside
        it, `data` as the constructor takes it, `settings` the constructor's keywords (`lr=1e-4`, …)."""
        from .load import from_pretrained_dir

        return from_pretrained_dir(model_dir, data, settings, option=None)

    # ---- identity and data -------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        keys = ("batch_size", "segment_seconds", "lr", "text_lr_scale", "weight_decay", "clip_grad",
                "cond_dropout", "guidance_scale", "max_text_len", "train_text_encoder", "amp")
        return {k: getattr(self, k) for k in keys} | {"examples": len(self.examples)}

    @property
    def sample_rate(self) -> int:
        return self.codec_rate

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.amp or "")

    @property
    def scaler(self) -> Any:
        return self._last_scaler

    def _examples(self, data: Any, caption_column: str | None, valid_every: int) -> list[Example]:
        if data is None:
            raise ValueError("HFMusicgenPipeline needs data: a folder, a manifest, a datasets.Dataset or clips")
        if isinstance(data, (str, Path)) or (
            isinstance(data, (list, tuple)) and data and isinstance(data[0], (str, Path))
        ):
            examples, self.data_problems = read_examples(data)
        elif hasattr(data, "column_names") or (hasattr(data, "keys") and hasattr(data, "values")):
            examples = examples_from_dataset(data, caption_column=caption_column)
        else:
            examples = examples_from_clips(data) if not (data and isinstance(data[0], Example)) else list(data)
        if len(examples) < 2:
            raise ValueError(f"HFMusicgenPipeline needs at least 2 examples, got {len(examples)}")
        if all(e.split == "train" for e in examples) and valid_every:  # hold out every n-th example
            for i, e in enumerate(examples):
                if i % valid_every == valid_every - 1:
                    e.split = "valid"
        return examples

    def split_examples(self, split: str) -> list[Example]:
        split = "valid" if split in ("validation", "val", "dev") else split
        out = [e for e in self.examples if e.split == split]
        if not out:
            raise ValueError(f"no examples in split {split!r}; splits: {sorted({e.split for e in self.examples})}")
        return out

    def golden_batch(self, seed: int) -> Batch:
        train = self.split_examples("train")
        rng = np.random.default_rng([seed, 7])
        pick = rng.choice(len(train), size=min(self.batch_size, len(train)), replace=False)
        return Batch([train[int(i)] for i in sorted(pick)], seed)

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[Batch]:
        """Shuffled batches of a split, one epoch after another."""
        pool = self.split_examples(split)
        rng = np.random.default_rng(seed)
        size = min(self.batch_size, len(pool))
        while True:
            order = rng.permutation(len(pool))
            for start in range(0, len(order) - size + 1, size):
                yield Batch([pool[int(i)] for i in order[start : start + size]], int(rng.integers(2**31)))

    def splits(self) -> dict[str, list[Example]]:
        return {s: [e for e in self.examples if e.split == s] for s in sorted({e.split for e in self.examples})}

    def training_examples(self) -> list[Example]:
        return self.split_examples("train")

    def with_captions(self, batch: Batch, captions: Sequence[str]) -> Batch:
        if len(captions) != len(batch):
            raise ValueError(f"{len(captions)} captions for a batch of {len(batch)}")
        return replace(batch, examples=[replace(e, caption=str(c)) for e, c in zip(batch.examples, captions)])

    # ---- model and optimiser -------------------------------------------------------------------

    def _instantiate(self, seed: int) -> Any:
        src = self._model_source
        torch.manual_seed(seed)
        if isinstance(src, (str, Path)):  # load once; every build is a copy of the pretrained weights
            if getattr(self, "_pretrained", None) is None:
                from transformers import MusicgenForConditionalGeneration
                from transformers.utils import logging

                logging.disable_progress_bar()
                self._pretrained = MusicgenForConditionalGeneration.from_pretrained(str(src))
            return copy.deepcopy(self._pretrained)
        if isinstance(src, torch.nn.Module):
            return copy.deepcopy(src)
        if hasattr(src, "to_dict") and not callable(src):  # a MusicgenConfig
            from transformers import MusicgenForConditionalGeneration

            return MusicgenForConditionalGeneration(src)
        if callable(src):
            takes_seed = len(inspect.signature(src).parameters) > 0
            return src(seed) if takes_seed else src()
        raise TypeError(f"model must be a MusicgenForConditionalGeneration, a config, a factory or a directory, "
                        f"not {type(src).__name__}")

    @staticmethod
    def _bandwidth(model: Any) -> float | None:
        """The codec bandwidth that yields the decoder's codebooks (per channel)."""
        cfg = model.config.audio_encoder
        want = model.decoder.num_codebooks // int(getattr(model.config.decoder, "audio_channels", 1) or 1)
        for bw in cfg.target_bandwidths:
            if model.audio_encoder.quantizer.get_num_quantizers_for_bandwidth(bw) == want:
                return bw
        return None

    def build_model(self, seed: int) -> Any:
        model = self._instantiate(seed)
        model.freeze_audio_encoder()  # HF's recommendation: the codec only makes labels
        if not self.train_text_encoder:
            model.freeze_text_encoder()
        self._last_model = model
        return model

    def param_groups(self, model: Any) -> list[dict[str, Any]]:
        """The decoder (and projection) at the learning rate, the text encoder at a fraction of it."""
        text = [p for p in model.text_encoder.parameters() if p.requires_grad]
        ids = {id(p) for p in text} | {id(p) for p in model.audio_encoder.parameters()}
        rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
        groups = [{"params": rest, "lr": self.lr}]
        if text:
            groups.append({"params": text, "lr": self.lr * self.text_lr_scale})
        return groups

    def build_optimizer(self, model: Any) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(self.param_groups(model), lr=self.lr, betas=self.betas,
                                weight_decay=self.weight_decay)
        if self.amp == "fp16":
            self._scalers[opt] = self._last_scaler = torch.amp.GradScaler("cpu")
        return opt

    def scaler_for(self, optimizer: Any) -> Any:
        return self._scalers.get(optimizer)

    def condition_parameters(self, model: Any) -> list[torch.nn.Parameter]:
        params = list(model.text_encoder.parameters())
        if getattr(model, "enc_to_dec_proj", None) is not None:
            params += list(model.enc_to_dec_proj.parameters())
        for layer in model.decoder.model.decoder.layers:
            params += list(layer.encoder_attn.parameters()) + list(layer.encoder_attn_layer_norm.parameters())
        return params

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        dtype = self.amp_dtype
        return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()

    # ---- the data path (each piece replaceable, as a user's code is) ------------------------------

    def collate(self, examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
        """Clips at their stored rate, zero-padded to one length `[B, C, T]`, and their lengths."""
        chans = max(e.audio.shape[0] for e in examples)
        lengths = np.array([e.audio.shape[-1] for e in examples], dtype=np.int64)
        out = np.zeros((len(examples), chans, int(lengths.max())), dtype=np.float32)
        for i, e in enumerate(examples):
            out[i, :, : lengths[i]] = e.audio if e.audio.shape[0] == chans else np.repeat(e.audio[:1], chans, 0)
        return out, lengths

    def resample(self, examples: Sequence[Example]) -> list[np.ndarray]:
        """Each clip at the codec's rate `[C, T']` (soxr, as datasets' Audio(sampling_rate=) does)."""
        out = []
        for e in examples:
            if e.sample_rate == self.codec_rate:
                out.append(e.audio)
            else:
                out.append(np.ascontiguousarray(resample(e.audio, e.sample_rate, self.codec_rate), dtype=np.float32))
        return out

    def to_channels(self, clip: np.ndarray) -> np.ndarray:
        """Mono checkpoints get the channel mean; stereo ones get two channels (mono duplicated)."""
        if self.audio_channels == 2:
            return clip if clip.shape[0] == 2 else np.repeat(clip[:1], 2, axis=0)
        return clip.mean(axis=0, keepdims=True) if clip.shape[0] > 1 else clip

    def choose_crops(self, lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        starts = np.array([int(rng.integers(0, max(1, n - segment + 1))) for n in lengths], dtype=np.int64)
        return np.stack([starts, starts + segment], axis=1)

    def apply_crops(self, audio: np.ndarray, bounds: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seg = int(bounds[0, 1] - bounds[0, 0])
        out = np.zeros((audio.shape[0], audio.shape[1], seg), dtype=np.float32)
        valid = np.zeros(len(bounds), dtype=np.int64)
        for i, (s, e) in enumerate(bounds):
            piece = audio[i, :, s : min(e, lengths[i])]
            out[i, :, : piece.shape[-1]] = piece
            valid[i] = piece.shape[-1]
        return out, valid

    @torch.no_grad()
    def encode(self, model: Any, audio: torch.Tensor) -> torch.Tensor:
        """Codec codes `[B, K, T]` of audio `[B, C, S]` (channels encoded apart and interleaved for stereo),
        from `codes_cache` when the same audio met the same codec before (codes_cache.py says when not)."""
        codec = model.audio_encoder

        def compute() -> torch.Tensor:
            if self.audio_channels == 2 and self.codec_channels == 1:
                left = codec.encode(audio[:, :1], bandwidth=self.bandwidth).audio_codes[0]
                right = codec.encode(audio[:, 1:2], bandwidth=self.bandwidth).audio_codes[0]
                return interleave_channels(left, right)
            return codec.encode(audio, bandwidth=self.bandwidth).audio_codes[0]

        settings = (self.bandwidth, self.audio_channels, self.codec_channels, self.codec_rate)
        return self.codes_cache.encode(codec, audio, settings, compute)

    def valid_frames(self, valid_samples: np.ndarray, frames: int) -> torch.Tensor:
        return torch.from_numpy(np.minimum(np.ceil(valid_samples / self.hop), frames).astype(np.int64))

    def _model_delays(self, model: Any, k: int) -> list[int] | None:
        cache = self.__dict__.setdefault("_delay_cache", {})
        key = (id(model.decoder), k)
        if key not in cache:
            cache[key] = model_delays(model.decoder, k, self.pad_token_id)
        return cache[key]

    def make_labels(self, model: Any, codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(delayed codes `[B, K, T']` with the pad id, labels `[B, T', K]` with -100)."""
        pattern = delayed_codes(model.decoder, codes, self.pad_token_id)
        return pattern, labels_from_pattern(pattern, valid, self.pad_token_id, self.audio_channels)

    def drop_captions(self, captions: list[str], rng: np.random.Generator) -> tuple[list[str], torch.Tensor]:
        """Classifier-free dropout: a caption becomes the empty (null) one with probability p."""
        dropped = rng.random(len(captions)) < self.cond_dropout
        return ["" if d else c for c, d in zip(captions, dropped)], torch.from_numpy(dropped)

    def tokenize(self, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(captions, padding=True, truncation=True, max_length=self.max_text_len,
                             return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        # An empty caption may tokenize to nothing; keep one (zeroed) position so attention stays finite.
        mask[:, 0] = torch.where(mask.sum(-1) == 0, torch.ones_like(mask[:, 0]), mask[:, 0])
        return ids, mask

    def forward(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
        return model(input_ids=ids, attention_mask=mask, labels=labels)

    def prepare_audio(self, batch: Batch, tap: Tap) -> tuple[np.ndarray, np.ndarray]:
        ex = batch.examples
        rates = {e.sample_rate for e in ex}
        if len(rates) == 1:
            original, lengths = self.collate(ex)
            tap("audio.original", original, sample_rate=rates.pop(), lengths=lengths.tolist())
        tap("caption", [e.caption for e in ex])
        tap("metadata", [dict(e.metadata) for e in ex])
        clips = self.resample(ex)
        lengths = np.array([c.shape[-1] for c in clips], dtype=np.int64)
        resampled, _ = self.collate([replace(e, audio=c, sample_rate=self.codec_rate) for e, c in zip(ex, clips)])
        tap("audio.resampled", resampled, sample_rate=self.codec_rate, lengths=lengths.tolist())
        shaped = np.stack([self.to_channels(resampled[i]) for i in range(len(ex))])
        tap("audio.mono" if self.audio_channels == 1 else "audio.channels", shaped, sample_rate=self.codec_rate,
            lengths=lengths.tolist())
        segment = int(round(self.segment_seconds * self.codec_rate))
        bounds = self.choose_crops(lengths, segment, np.random.default_rng([batch.seed, 1]))
        tap("crop", bounds, sample_rate=self.codec_rate, lengths=lengths.tolist())
        cropped, valid = self.apply_crops(shaped, bounds, lengths)
        tap("audio.cropped", cropped, sample_rate=self.codec_rate, lengths=valid.tolist())
        return cropped, valid

    def step(self, model: Any, batch: Batch, tap: Tap = _no_tap) -> StepOutput:
        cropped, valid = self.prepare_audio(batch, tap)
        codes = self.encode(model, torch.from_numpy(cropped))
        tap("tokens", codes, cardinality=self.cardinality, frame_rate=self.frame_rate)
        frames = self.valid_frames(valid, codes.shape[-1])
        padding = torch.arange(codes.shape[-1])[None, :] < frames[:, None]
        tap("mask.padding", padding)
        pattern, labels = self.make_labels(model, codes, frames)
        # The delays the decoder itself generates with, beside whatever make_labels built: a check
        # compares them with the delays the training pattern actually has.
        tap("tokens.pattern", pattern, special=self.pad_token_id,
            model_delay=self._model_delays(model, codes.shape[1]))
        captions, dropped = self.drop_captions([e.caption for e in batch.examples],
                                               np.random.default_rng([batch.seed, 2]))
        tap("condition.dropped", dropped, rate=self.cond_dropout)
        ids, mask = self.tokenize(captions)
        tap("condition.tokens", ids, max_len=self.max_text_len)
        tap("condition.mask", mask)
        tap("targets", labels, ignore_index=-100)
        with self.autocast():
            out = self.forward(model, ids, mask, labels)
        tap("condition.embedding", out.encoder_last_hidden_state)
        tap("logits", out.logits)
        # What HF's loss counts: not the ignore index, and (transformers >= 5) not the pad id either.
        loss_mask = ((labels != -100) & (labels != self.pad_token_id)).transpose(1, 2)  # [B, K, T']
        tap("mask.loss", loss_mask)
        tap("loss", out.loss)
        per_codebook = self.per_codebook_loss(out.logits, labels)
        tap("loss.per_codebook", per_codebook)
        return StepOutput(loss=out.loss, logits=out.logits, targets=labels, mask=loss_mask,
                          extras={"per_codebook": per_codebook, "padding_mask": padding})

    @torch.no_grad()
    def per_codebook_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each codebook (as AudioCraft logs it), from HF's `[B*K, T', V]` logits."""
        b, tp, k = labels.shape
        if logits.shape[0] != b * k:  # not HF's [B*K, T', V]: a batch that grew or shrank inside the model
            return torch.full((k,), float("nan"))
        lg = logits.detach().float().reshape(b, k, -1, logits.shape[-1])[:, :, -tp:]
        return torch.stack([torch.nn.functional.cross_entropy(lg[:, i].reshape(-1, lg.shape[-1]),
                                                              labels[..., i].reshape(-1), ignore_index=-100)
                            for i in range(k)])

    def train_step(self, model: Any, optimizer: Any, batch: Batch, tap: Tap = _no_tap) -> StepOutput:
        """One update as HF's Trainer does it: backward, unscale, clip, step, zero_grad."""
        model.train()
        out = self.step(model, batch, tap)
        scaler = self.scaler_for(optimizer)
        (scaler.scale(out.loss) if scaler else out.loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        trainable = [p for p in model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(trainable, self.clip_grad)
        tap("grad.norm", norm)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
            tap("amp.scale", scaler.get_scale())
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(norm)
        return out
