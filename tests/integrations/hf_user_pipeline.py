"""A hand-written Hugging Face MusicGen fine-tuning pipeline, the way a user would write one.

It uses no signalchain integration code: only `StepOutput` and the `tap` it is handed (DESIGN §3),
and follows transformers' own MusicGen training conventions (as in the public musicgen dreambooth
fine-tuning scripts):

    dataset rows (audio 32 kHz, mono or stereo) + captions
      -> resample to the codec rate (soxr) -> downmix -> random fixed-length crop (zero-padded)
      -> frozen `model.audio_encoder.encode` -> codes [B, K, T]
      -> BOS column + `decoder.build_delay_pattern_mask` / `apply_delay_pattern_mask` -> drop BOS
      -> labels [B, T', K], -100 on padding frames and on the pattern's pad positions
      -> caption dropout ("" for the unconditional rows) -> PreTrainedTokenizerFast
      -> `model(input_ids, attention_mask, labels=labels)`: HF shifts the labels right behind the
         decoder start token and computes the per-codebook cross-entropy itself.

Everything is built offline from tiny configs (no hub access). The audio data comes from
`signalchain.reference.data.generate_clip`, used only as a source of captioned test clips.

    signalchain doctor tests/integrations/hf_user_pipeline.py:make_pipeline
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import soxr
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    EncodecConfig,
    EncodecModel,
    GenerationConfig,
    MusicgenConfig,
    MusicgenDecoderConfig,
    MusicgenForConditionalGeneration,
    PreTrainedTokenizerFast,
    T5Config,
)

from signalchain import StepOutput
from signalchain.reference.data import caption_vocabulary, generate_clip

__all__ = ["HFUserPipeline", "make_pipeline", "SETTINGS"]

#: The whole run's settings (a user's argparse namespace / training config).
SETTINGS: dict[str, Any] = {
    # data
    "source_sample_rate": 32000,  # what the dataset stores
    "sample_rate": 16000,  # the codec's rate
    "segment_seconds": 1.0,
    "batch_size": 4,
    "train_size": 24,
    "valid_size": 8,
    "text_max_length": 32,  # captions are ~25 tokens with </s>: never truncated
    "cond_dropout": 0.1,
    # codec (EnCodec): hop 8*5*4*2 = 320 -> 50 Hz; 64 codes = 6 bits; 1.2 kbps / (50 * 6) = 4 codebooks
    "upsampling_ratios": [8, 5, 4, 2],
    "codebook_size": 64,
    "target_bandwidths": [1.2],
    "codec_hidden_size": 16,
    "codec_num_filters": 4,
    "codec_residual_layers": 0,  # no resnet blocks: encode+decode ~5 ms per batch on CPU
    "codec_seed": 1234,  # the "pretrained" codec: the same whatever the LM's seed
    # text encoder (T5)
    "t5_d_model": 32,
    "t5_layers": 1,
    "t5_heads": 4,
    "t5_d_kv": 8,
    "t5_d_ff": 64,
    # decoder
    "hidden_size": 64,
    "layers": 2,
    "heads": 4,
    "ffn_dim": 128,
    "num_codebooks": 4,
    # optimisation
    "lr": 2e-3,
    "betas": (0.9, 0.99),
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    # generation (HF's musicgen-small generation_config: do_sample, guidance 3)
    "guidance_scale": 3.0,
}


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


class HFUserPipeline:
    """A transformers MusicGen fine-tuning step written against the Pipeline protocol by hand."""

    name = "hf-user"

    def __init__(self, settings: dict[str, Any] | None = None):
        self.s = {**SETTINGS, **(settings or {})}
        self._rows: dict[tuple[str, int], dict[str, Any]] = {}
        self._codec_state: dict[str, torch.Tensor] | None = None
        self.tokenizer = self._build_tokenizer()

    # ---- identity -------------------------------------------------------------------------------

    @property
    def sample_rate(self) -> int:
        return int(self.s["sample_rate"])

    @property
    def frame_rate(self) -> float:
        return self.s["sample_rate"] / math.prod(self.s["upsampling_ratios"])

    @property
    def hop(self) -> int:
        return int(math.prod(self.s["upsampling_ratios"]))

    @property
    def segment(self) -> int:
        return int(round(self.s["segment_seconds"] * self.s["sample_rate"]))

    # ---- data: rows as a `datasets` Audio column decodes them ---------------------------------------

    def _row(self, split: str, index: int) -> dict[str, Any]:
        key = (split, index)
        if key not in self._rows:
            # Validation pieces are other pieces (other titles), not other renderings of the training ones.
            number = index if split == "train" else 1000 + index
            seconds = 1.2 + 0.3 * (index % 4)  # 1.2-2.1 s: most clips longer than the 1 s crop
            clip = generate_clip(number, 0, self.s["source_sample_rate"], seconds=seconds)
            self._rows[key] = self._as_row(clip)
        return self._rows[key]

    @staticmethod
    def _as_row(clip: Any) -> dict[str, Any]:
        meta = dict(clip.metadata)
        return {"id": clip.source_id,
                "audio": {"path": f"{clip.source_id}.wav", "array": clip.audio, "sampling_rate": clip.sample_rate},
                "caption": clip.caption,
                **{k: meta[k] for k in ("title", "artist", "genre", "key", "bpm", "instrument", "moods")}}

    def split_rows(self, split: str) -> list[dict[str, Any]]:
        n = self.s["train_size"] if split == "train" else self.s["valid_size"]
        return [self._row(split, i) for i in range(n)]

    @staticmethod
    def collate(rows: Sequence[dict[str, Any]], seed: int) -> dict[str, Any]:
        return {"audio": [r["audio"]["array"] for r in rows],
                "sampling_rate": int(rows[0]["audio"]["sampling_rate"]),
                "caption": [r["caption"] for r in rows],
                "metadata": [{k: v for k, v in r.items() if k != "audio"} for r in rows],
                "seed": int(seed)}

    def golden_batch(self, seed: int) -> dict[str, Any]:
        """Three clips of collection 100+seed plus one shorter than the crop (padding exercised)."""
        b, sr = self.s["batch_size"], self.s["source_sample_rate"]
        clips = [generate_clip(i, 100 + seed, sr, seconds=1.5 + 0.2 * i) for i in range(b - 1)]
        clips.append(generate_clip(b - 1, 100 + seed, sr, seconds=0.6 * self.s["segment_seconds"]))
        return self.collate([self._as_row(c) for c in clips], seed)

    def loader(self, split: str = "train", seed: int = 0) -> Iterator[dict[str, Any]]:
        """Shuffled batches of a split, epoch after epoch (drop_last, like a DataLoader)."""
        rows = self.split_rows(split)
        rng = np.random.default_rng(seed)
        b = self.s["batch_size"]
        while True:
            order = rng.permutation(len(rows))
            for start in range(0, len(order) - b + 1, b):
                yield self.collate([rows[i] for i in order[start : start + b]], int(rng.integers(2**31)))

    def splits(self) -> dict[str, list[dict[str, Any]]]:
        return {"train": self.split_rows("train"), "validation": self.split_rows("validation")}

    def training_examples(self) -> list[dict[str, Any]]:
        return self.split_rows("train")

    def with_captions(self, batch: dict[str, Any], captions: Sequence[str]) -> dict[str, Any]:
        if len(captions) != len(batch["caption"]):
            raise ValueError(f"{len(captions)} captions for a batch of {len(batch['caption'])}")
        out = dict(batch)
        out["caption"] = list(captions)
        return out

    # ---- tokenizer ----------------------------------------------------------------------------------

    def _build_tokenizer(self) -> PreTrainedTokenizerFast:
        # The dataset card's caption vocabulary (every word a caption can hold), plus punctuation.
        pre = pre_tokenizers.Whitespace()
        vocab = {"[PAD]": 0, "</s>": 1, "[UNK]": 2, ",": 3}
        for w in caption_vocabulary():
            vocab.setdefault(w, len(vocab))
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                       eos_token="</s>", model_max_length=self.s["text_max_length"])

    def tokenize(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(list(captions), padding=True, truncation=True,
                              max_length=self.s["text_max_length"], return_tensors="pt")

    # ---- model and optimiser -------------------------------------------------------------------------

    def model_config(self) -> MusicgenConfig:
        s, card = self.s, self.s["codebook_size"]
        text = T5Config(vocab_size=len(self.tokenizer), d_model=s["t5_d_model"], d_kv=s["t5_d_kv"],
                        d_ff=s["t5_d_ff"], num_layers=s["t5_layers"], num_heads=s["t5_heads"],
                        dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
        audio = EncodecConfig(sampling_rate=s["sample_rate"], upsampling_ratios=list(s["upsampling_ratios"]),
                              codebook_size=card, target_bandwidths=list(s["target_bandwidths"]),
                              hidden_size=s["codec_hidden_size"], num_filters=s["codec_num_filters"],
                              num_lstm_layers=1, num_residual_layers=s["codec_residual_layers"], audio_channels=1)
        decoder = MusicgenDecoderConfig(vocab_size=card, max_position_embeddings=256,
                                        num_hidden_layers=s["layers"], ffn_dim=s["ffn_dim"],
                                        num_attention_heads=s["heads"], hidden_size=s["hidden_size"],
                                        dropout=0.0, num_codebooks=s["num_codebooks"], audio_channels=1,
                                        pad_token_id=card, bos_token_id=card, decoder_start_token_id=card)
        return MusicgenConfig(text_encoder=text, audio_encoder=audio, decoder=decoder)

    def _pretrained_codec(self, config: EncodecConfig) -> dict[str, torch.Tensor]:
        """The codec's weights: random from a fixed seed, codebooks filled (HF starts them at zero).

        Each level's codebook is initialised the way EnCodec's k-means init starts: from randomly
        chosen residual frames of some training audio (plus a little noise), so codes spread out.
        """
        if self._codec_state is None:
            torch.manual_seed(self.s["codec_seed"])
            codec = EncodecModel(copy.deepcopy(config))
            g = torch.Generator().manual_seed(self.s["codec_seed"])
            sr_in, sr = self.s["source_sample_rate"], self.s["sample_rate"]
            calib = [soxr.resample(r["audio"]["array"].mean(axis=0), sr_in, sr).astype(np.float32)
                     for r in self.split_rows("train")[:8]]
            with torch.no_grad():
                residual = torch.cat([codec.encoder(torch.from_numpy(c)[None, None]) for c in calib], dim=-1)
                for layer in codec.quantizer.layers:
                    book = layer.codebook
                    frames = residual[0].T  # [F, D]
                    pick = torch.randperm(frames.shape[0], generator=g)[: book.embed.shape[0]]
                    noise = torch.randn(book.embed.shape, generator=g) * 0.01 * frames.std()
                    book.embed.copy_(frames[pick] + noise)
                    book.embed_avg.copy_(book.embed)
                    residual = residual - layer.decode(layer.encode(residual))
            self._codec_state = {k: v.clone() for k, v in codec.state_dict().items()}
        return self._codec_state

    def build_model(self, seed: int) -> MusicgenForConditionalGeneration:
        config = self.model_config()
        torch.manual_seed(seed)
        model = MusicgenForConditionalGeneration(config)
        model.audio_encoder.load_state_dict(self._pretrained_codec(config.audio_encoder))
        model.freeze_audio_encoder()
        card = self.s["codebook_size"]
        model.generation_config = GenerationConfig(
            decoder_start_token_id=card, pad_token_id=card, bos_token_id=card, do_sample=True,
            guidance_scale=self.s["guidance_scale"], max_length=256)
        return model

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.s["lr"], betas=self.s["betas"],
                                 weight_decay=self.s["weight_decay"])

    def condition_parameters(self, model: MusicgenForConditionalGeneration) -> list[torch.nn.Parameter]:
        params = list(model.text_encoder.parameters())
        if getattr(model, "enc_to_dec_proj", None) is not None:
            params += list(model.enc_to_dec_proj.parameters())
        for layer in model.decoder.model.decoder.layers:
            params += list(layer.encoder_attn.parameters()) + list(layer.encoder_attn_layer_norm.parameters())
        return params

    # ---- the training step ------------------------------------------------------------------------------

    def prepare_audio(self, batch: dict[str, Any], tap: Any) -> tuple[np.ndarray, np.ndarray]:
        sr_in, sr = batch["sampling_rate"], self.s["sample_rate"]
        clips = [np.atleast_2d(np.asarray(a, dtype=np.float32)) for a in batch["audio"]]
        lengths = np.array([c.shape[-1] for c in clips], dtype=np.int64)
        channels = max(c.shape[0] for c in clips)
        original = np.zeros((len(clips), channels, int(lengths.max())), dtype=np.float32)
        for i, c in enumerate(clips):
            original[i, :, : c.shape[-1]] = c if c.shape[0] == channels else np.repeat(c, channels, axis=0)
        tap("audio.original", original, sample_rate=sr_in, lengths=lengths)
        tap("caption", list(batch["caption"]))
        tap("metadata", list(batch["metadata"]))

        resampled = [soxr.resample(original[i, :, : lengths[i]].T, sr_in, sr).T.astype(np.float32)
                     for i in range(len(clips))]
        new_lengths = np.array([r.shape[-1] for r in resampled], dtype=np.int64)
        audio = np.zeros((len(clips), channels, int(new_lengths.max())), dtype=np.float32)
        for i, r in enumerate(resampled):
            audio[i, :, : r.shape[-1]] = r
        tap("audio.resampled", audio, sample_rate=sr, lengths=new_lengths)
        mono = audio.mean(axis=1, keepdims=True)
        tap("audio.mono", mono, sample_rate=sr, lengths=new_lengths)

        rng = np.random.default_rng([batch["seed"], 1])
        starts = np.array([rng.integers(0, max(n - self.segment, 0) + 1) for n in new_lengths], dtype=np.int64)
        bounds = np.stack([starts, starts + self.segment], axis=1)
        tap("crop", bounds, sample_rate=sr, lengths=new_lengths)
        cropped = np.zeros((len(clips), 1, self.segment), dtype=np.float32)
        valid = np.zeros(len(clips), dtype=np.int64)
        for i, (start, n) in enumerate(zip(starts, new_lengths)):
            k = int(min(self.segment, n - start))
            cropped[i, :, :k] = mono[i, :, start : start + k]
            valid[i] = k
        tap("audio.cropped", cropped, sample_rate=sr, lengths=valid)
        return cropped, valid

    def labels_from_codes(self, model: MusicgenForConditionalGeneration, codes: torch.Tensor,
                          valid_frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """codes [B, K, T] -> (delayed codes [B, K, T+K-1], labels [B, T+K-1, K] with -100)."""
        b, k, t = codes.shape
        pad = model.generation_config.pad_token_id
        bos = torch.full((b * k, 1), model.generation_config.decoder_start_token_id, dtype=torch.long)
        ids = torch.cat([bos, codes.reshape(b * k, t)], dim=-1)  # [B*K, T+1]
        _, pattern = model.decoder.build_delay_pattern_mask(ids, pad_token_id=pad, max_length=t + k)
        delayed = model.decoder.apply_delay_pattern_mask(torch.full_like(pattern, pad), pattern)
        delayed = delayed.reshape(b, k, t + k)[:, :, 1:]  # drop the BOS column: [B, K, T+K-1]
        # frame f of codebook q sits at delayed step f + q; steps of frames past a clip's end are padding
        steps = torch.arange(t + k - 1)[None, None, :] - torch.arange(k)[None, :, None]  # frame index
        padded = steps[None] >= valid_frames[:, None, None, None]  # [B, 1, K, T'] -> squeeze below
        labels = delayed.masked_fill(padded[:, 0] | (delayed == pad), -100)
        return delayed, labels.transpose(1, 2).contiguous()  # HF wants labels [B, T', K]

    def step(self, model: MusicgenForConditionalGeneration, batch: dict[str, Any], tap: Any = _no_tap) -> StepOutput:
        cropped, valid = self.prepare_audio(batch, tap)
        audio = torch.from_numpy(cropped)
        sample_mask = (torch.arange(self.segment)[None, :] < torch.from_numpy(valid)[:, None])
        with torch.no_grad():
            codes = model.audio_encoder.encode(audio, padding_mask=sample_mask).audio_codes[0]  # [B, K, T]
        tap("tokens", codes, cardinality=self.s["codebook_size"], frame_rate=self.frame_rate)
        frames = codes.shape[-1]
        valid_frames = torch.from_numpy(np.ceil(valid / self.hop).astype(np.int64))
        padding = torch.arange(frames)[None, :] < valid_frames[:, None]  # [B, T] True = real audio
        tap("mask.padding", padding)

        delayed, labels = self.labels_from_codes(model, codes, valid_frames)
        tap("tokens.pattern", delayed, special=model.generation_config.pad_token_id)
        tap("targets", labels, cardinality=self.s["codebook_size"], ignore_index=-100)
        loss_mask = (labels != -100).transpose(1, 2)  # [B, K, T']
        tap("mask.loss", loss_mask)

        rng = np.random.default_rng([batch["seed"], 2])
        dropped = rng.random(len(batch["caption"])) < self.s["cond_dropout"]
        captions = ["" if d else c for c, d in zip(batch["caption"], dropped)]
        tap("condition.dropped", torch.from_numpy(dropped), rate=self.s["cond_dropout"])
        text = self.tokenize(captions)
        tap("condition.tokens", text["input_ids"], max_len=self.s["text_max_length"],
            vocab_size=len(self.tokenizer))
        tap("condition.mask", text["attention_mask"].bool())

        out = model(input_ids=text["input_ids"], attention_mask=text["attention_mask"], labels=labels)
        tap("condition.embedding", out.encoder_last_hidden_state)
        tap("logits", out.logits)  # [B*K, T', V] as HF returns them
        tap("loss", out.loss)
        return StepOutput(loss=out.loss, logits=out.logits, targets=labels, mask=loss_mask,
                          extras={"padding_mask": padding, "codes": codes})

    def train_step(self, model: MusicgenForConditionalGeneration, optimizer: torch.optim.Optimizer,
                   batch: dict[str, Any], tap: Any = _no_tap) -> StepOutput:
        model.train()
        out = self.step(model, batch, tap)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                                   self.s["max_grad_norm"])
        tap("grad.norm", grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out

    # ---- generation ------------------------------------------------------------------------------------

    def generate(self, model: MusicgenForConditionalGeneration, batch: dict[str, Any],
                 sampling: dict[str, Any] | None = None) -> torch.Tensor:
        """HF's `model.generate`: audio values [B, 1, samples]."""
        sampling = dict(sampling or {})
        k = self.s["num_codebooks"]
        frames = int(sampling.get("max_frames") or round(self.s["segment_seconds"] * self.frame_rate))
        kwargs: dict[str, Any] = {"max_new_tokens": frames + k - 1,
                                  "guidance_scale": float(sampling.get("cfg_coef", self.s["guidance_scale"]))}
        greedy = bool(sampling.get("greedy", False)) or sampling.get("temperature", 1.0) == 0
        kwargs["do_sample"] = not greedy
        if not greedy:
            kwargs["temperature"] = float(sampling.get("temperature", 1.0))
            kwargs["top_k"] = int(sampling.get("top_k", 0) or 0)
            top_p = float(sampling.get("top_p", 0.0) or 0.0)
            kwargs["top_p"] = top_p if 0 < top_p < 1 else 1.0
        torch.manual_seed(int(sampling.get("seed", 0)))
        text = self.tokenize(batch["caption"])
        was_training = model.training
        model.eval()
        try:
            return model.generate(input_ids=text["input_ids"], attention_mask=text["attention_mask"], **kwargs)
        finally:
            model.train(was_training)

    def decode(self, tokens: torch.Tensor, model: MusicgenForConditionalGeneration) -> torch.Tensor:
        return self._decode_with(model.audio_encoder, tokens)

    def _decode_with(self, codec: EncodecModel, tokens: Any) -> torch.Tensor:
        """Codes [B, K, T] -> audio [B, 1, T * hop] through the frozen EnCodec decoder."""
        codes = torch.as_tensor(tokens)
        k = self.s["num_codebooks"]
        if codes.is_floating_point() or codes.dim() != 3 or codes.shape[1] != k:
            raise ValueError(f"decode expects integer codes [B, {k}, T], got {codes.dtype} {tuple(codes.shape)}")
        with torch.no_grad():
            return codec.decode(codes.long()[None], [None]).audio_values  # [B, 1, samples]


def make_pipeline() -> HFUserPipeline:
    return HFUserPipeline()


class HFUserPipelineOwnDecode(HFUserPipeline):
    """The same pipeline with `decode(tokens)` alone: it decodes with the codec it built last.

    (Every model it builds carries the same frozen codec, so any of them decodes the same.)
    """

    name = "hf-user"

    def build_model(self, seed: int) -> MusicgenForConditionalGeneration:
        model = super().build_model(seed)
        self._codec = model.audio_encoder
        return model

    def decode(self, tokens: torch.Tensor, model: MusicgenForConditionalGeneration | None = None) -> torch.Tensor:
        return self._decode_with(model.audio_encoder if model is not None else self._codec, tokens)


def make_pipeline_own_decode() -> HFUserPipelineOwnDecode:
    return HFUserPipelineOwnDecode()
