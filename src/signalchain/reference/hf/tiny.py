"""A tiny Hugging Face MusicGen built offline, the way a user would set one up for a smoke test:
a T5 text encoder, an Encodec codec, a MusicGen decoder over its codes, and a word-level tokenizer.

HF's freshly initialised Encodec has all-zero codebooks (every frame would encode to code 0), so
the codebooks are filled from the encoder's own outputs on a few clips: codebook 0 from encoder
frames, each next one from the residual the previous ones leave (a one-pass residual k-means seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr
import torch

from ..data import caption_vocabulary, caption_words, generate_clip

__all__ = ["TinyConfig", "tiny_tokenizer", "tiny_model", "fill_codebooks", "bed_clips"]


@dataclass(frozen=True)
class TinyConfig:
    sample_rate: int = 16000  # the codec's rate; the data is stored at 32 kHz and resampled
    upsampling_ratios: tuple[int, ...] = (8, 5, 4, 2)  # hop 320: 50 frames per second
    codebook_size: int = 64
    num_codebooks: int = 4
    codec_hidden: int = 16
    codec_filters: int = 4
    text_dim: int = 32
    text_layers: int = 1
    decoder_dim: int = 64
    decoder_layers: int = 2
    decoder_heads: int = 4
    max_text_len: int = 32
    audio_channels: int = 1  # 2: a stereo checkpoint (interleaved codebooks)


def tiny_tokenizer(max_len: int = 32):
    """A word-level tokenizer over the reference captions, wrapped as HF's fast tokenizer. It ends
    every caption with </s> (as T5's does), so an empty (dropped) caption still has one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "</s>", *caption_vocabulary()]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>",
                                   model_max_length=max_len)
    return fast


def _configs(cfg: TinyConfig, vocab: int):
    from transformers import EncodecConfig, MusicgenConfig, MusicgenDecoderConfig, T5Config

    text = T5Config(vocab_size=vocab, d_model=cfg.text_dim, d_kv=8, d_ff=2 * cfg.text_dim,
                    num_layers=cfg.text_layers, num_heads=4, dropout_rate=0.0, pad_token_id=0,
                    eos_token_id=2, decoder_start_token_id=0)
    hop = int(np.prod(cfg.upsampling_ratios))
    frame_rate = int(np.ceil(cfg.sample_rate / hop))
    bits = int(np.log2(cfg.codebook_size))
    bandwidth = cfg.num_codebooks * frame_rate * bits / 1000
    codec = EncodecConfig(sampling_rate=cfg.sample_rate, audio_channels=1, hidden_size=cfg.codec_hidden,
                          num_filters=cfg.codec_filters, num_residual_layers=1,
                          upsampling_ratios=list(cfg.upsampling_ratios), codebook_size=cfg.codebook_size,
                          codebook_dim=cfg.codec_hidden, num_lstm_layers=1, target_bandwidths=[bandwidth],
                          normalize=False, use_causal_conv=True)
    k = cfg.num_codebooks * cfg.audio_channels
    decoder = MusicgenDecoderConfig(vocab_size=cfg.codebook_size, num_codebooks=k, hidden_size=cfg.decoder_dim,
                                    num_hidden_layers=cfg.decoder_layers, num_attention_heads=cfg.decoder_heads,
                                    ffn_dim=2 * cfg.decoder_dim, max_position_embeddings=1024, dropout=0.0,
                                    attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0,
                                    pad_token_id=cfg.codebook_size, bos_token_id=cfg.codebook_size,
                                    decoder_start_token_id=cfg.codebook_size, audio_channels=cfg.audio_channels)
    return MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=codec.to_dict(), decoder=decoder.to_dict())


def bed_clips(n: int, seed: int = 0, sample_rate: int = 32000, short_every: int = 6) -> list:
    """`n` captioned reference clips (3-8 s at 32 kHz); every `short_every`-th one is 1.2 s long,
    shorter than the training crop, so padding and its mask are exercised."""
    return [generate_clip(i, seed, sample_rate, seconds=1.2 if short_every and i % short_every == short_every - 1
                          else None) for i in range(n)]


@torch.no_grad()
def fill_codebooks(model, cfg: TinyConfig, seed: int = 0) -> None:
    """Seed every codebook of the codec from encoder frames of a few clips (see the module doc)."""
    codec = model.audio_encoder
    clips = [generate_clip(1000 + i, seed, cfg.sample_rate, seconds=2.0) for i in range(6)]
    audio = torch.from_numpy(np.stack([c.audio.mean(axis=0, keepdims=True) for c in clips]))
    frames = codec.encoder(audio).transpose(1, 2).reshape(-1, cfg.codec_hidden)  # [N, D]
    g = torch.Generator().manual_seed(seed)
    residual = frames.clone()
    for layer in codec.quantizer.layers:
        book = layer.codebook
        pick = torch.randperm(residual.shape[0], generator=g)[: book.embed.shape[0]]
        entries = residual[pick] + 1e-3 * torch.randn(len(pick), residual.shape[1], generator=g)
        book.embed.copy_(entries)
        book.embed_avg.copy_(entries)
        book.cluster_size.fill_(1.0)
        book.inited.fill_(True)
        residual = residual - layer.decode(layer.encode(residual.T[None]))[0].T


_BUILT: dict[tuple, object] = {}


def tiny_model(seed: int = 0, cfg: TinyConfig = TinyConfig(), vocab: int | None = None):
    """A `MusicgenForConditionalGeneration` for `cfg`, the same weights for a seed, the codebooks
    filled so that different audio gets different codes. Built once per process and seed, then
    copied (building and filling take seconds; a copy takes milliseconds)."""
    import copy

    from transformers import MusicgenForConditionalGeneration
    from transformers.utils import logging

    vocab = vocab or len(tiny_tokenizer(cfg.max_text_len))
    key = (seed, cfg, vocab)
    if key not in _BUILT:
        logging.set_verbosity_error()  # HF warns that the pad id (= codebook size) is past the vocabulary: by design
        torch.manual_seed(seed)
        model = MusicgenForConditionalGeneration(_configs(cfg, vocab))
        fill_codebooks(model, cfg, seed=0)  # the codec is the same for every seed, as a pretrained one is
        gen = model.generation_config
        gen.decoder_start_token_id = gen.pad_token_id = gen.bos_token_id = cfg.codebook_size
        gen.do_sample, gen.guidance_scale, gen.max_length = True, 3.0, 256
        if len(_BUILT) >= 8:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = model
    return copy.deepcopy(_BUILT[key])


def resample_clip(audio: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    return np.ascontiguousarray(soxr.resample(audio.T, sr_in, sr_out).T, dtype=np.float32)


def words_of(captions: list[str]) -> list[str]:
    return [w for c in captions for w in caption_words(c)]
