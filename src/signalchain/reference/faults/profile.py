"""Expensive work inside the step: what a profile by stage finds (`doctor --symptom slow`).

Each fault adds work the way the real bug does, sized against the reference's own step so that it
is large by construction (its stage takes well over twice the share the judge asks for, or allocates
twice the memory excess it asks for) whatever the machine's speed: both sides of each ratio are the
same pipeline's work in the same run.
- `codec_encode_every_step`: a real codec (EnCodec) is a convolutional network; the reference's is a
  cheap numpy stand-in, so the fault adds the encoder's convolutions, run on each whole uncropped
  clip on every step, before the crop's tokens are quantised. Tokens are unchanged (a token cache
  changes what a step costs, not what it computes).
- `slow_resampler`: a long windowed-sinc FIR applied sample by sample at the input rate with
  `np.convolve`, then decimated (no polyphase, no FFT), on each clip and channel of every batch.
- `tokenizer_per_batch`: the caption tokenizer is rebuilt on every call from the dataset's caption
  corpus (its vocabulary counted again).
- `float_attention_mask`: a dense additive float mask [B, H, K·F, K·F] built per step from the
  padding mask, and kept for the model's attention.
- `logits_host_copy`: a per-step accuracy metric on a float64 host copy of the logits, softmaxed,
  against one-hot targets.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..data import clip_attributes, make_caption
from ..text import WordTokenizer, split_words
from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import ReferencePipeline

FAMILY = "profile"
SECTION = "Slow training and stalled pipelines"
ENCODER_CHANNELS = 12  # first layer's width; the SEANet-like stack doubles it at each stride
FIR_TAPS = 2047
CORPUS = 150_000  # captions in the dataset's caption file


def _encoder() -> torch.nn.Module:
    """A frozen SEANet-like encoder: strides 2, 4, 5, 8 (320 samples per frame, like the codec's hop)."""
    torch.manual_seed(1234)
    c = ENCODER_CHANNELS
    enc = torch.nn.Sequential(
        torch.nn.Conv1d(1, c, 7, padding=3), torch.nn.ELU(),
        torch.nn.Conv1d(c, 2 * c, 4, stride=2), torch.nn.ELU(),
        torch.nn.Conv1d(2 * c, 4 * c, 8, stride=4), torch.nn.ELU(),
        torch.nn.Conv1d(4 * c, 8 * c, 10, stride=5), torch.nn.ELU(),
        torch.nn.Conv1d(8 * c, 128, 16, stride=8))
    return enc.requires_grad_(False).eval()


@fault("codec_encode_every_step", FAMILY, "an unexpectedly expensive calculation: the codec encodes every whole "
       "clip on every step (no token cache)", SECTION, ["perf.expensive_stage"], "tokens", symptom="slow")
def _codec_encode_every_step(p: ReferencePipeline) -> None:
    encoder = _encoder()
    full: dict[str, np.ndarray] = {}
    apply_crops, encode_tokens = p.apply_crops, p.encode_tokens

    def keep_full(audio: np.ndarray, bounds: np.ndarray, lengths: np.ndarray) -> Any:
        full["mono"] = audio  # [B, 1, T] the whole clip, before the crop
        return apply_crops(audio, bounds, lengths)

    def encode(cropped: np.ndarray) -> torch.Tensor:
        # Bug: the codec's encoder runs on the whole clip of every example on every step; only the
        # crop's frames are kept. Encoding the dataset once and cropping cached tokens costs nothing here.
        with torch.no_grad():
            encoder(torch.from_numpy(np.ascontiguousarray(full["mono"][:, :1])))
        return encode_tokens(cropped)

    p.apply_crops = keep_full  # type: ignore[method-assign]
    p.encode_tokens = encode  # type: ignore[method-assign]


def _fir(sr_in: int, sr_out: int) -> np.ndarray:
    cutoff = 0.5 * min(sr_in, sr_out) / sr_in  # cycles per input sample
    n = np.arange(FIR_TAPS) - (FIR_TAPS - 1) / 2
    return (2 * cutoff * np.sinc(2 * cutoff * n) * np.hanning(FIR_TAPS)).astype(np.float32)


@fault("slow_resampler", FAMILY, "an unexpectedly expensive calculation: resampling with a direct FIR at the "
       "input rate inside the step", SECTION, ["perf.expensive_stage"], "audio.resampled", symptom="slow")
def _slow_resampler(p: ReferencePipeline) -> None:
    def resample(audio: np.ndarray, lengths: np.ndarray, sr_in: int, sr_out: int) -> tuple[np.ndarray, np.ndarray]:
        if sr_in % sr_out:
            raise ValueError(f"this resampler only decimates by an integer factor, not {sr_in} -> {sr_out}")
        step, taps = sr_in // sr_out, _fir(sr_in, sr_out)
        new = (lengths + step - 1) // step
        out = np.zeros((audio.shape[0], audio.shape[1], int(new.max(initial=0))), dtype=np.float32)
        for i in range(audio.shape[0]):
            for c in range(audio.shape[1]):
                # Bug: every input sample is filtered (direct convolution), then all but 1 in `step` are
                # thrown away; a polyphase or FFT resampler, once per clip outside the step, costs a fraction.
                y = np.convolve(audio[i, c, : lengths[i]], taps, mode="same")[::step]
                out[i, c, : y.shape[0]] = y
        return out, new.astype(np.int64)

    p.resample = resample  # type: ignore[method-assign]


class _RebuiltTokenizer:
    """Rebuilds the word tokenizer from the caption corpus on every call (ids unchanged: the
    vocabulary's order is fixed by the clean tokenizer's)."""

    def __init__(self, clean: WordTokenizer, corpus: list[str]):
        self.clean, self.corpus = clean, corpus
        self.max_len, self.vocab_size = clean.max_len, clean.vocab_size

    def encode(self, captions: list[str]) -> Any:
        # Bug: the tokenizer is constructed inside the step: its vocabulary is counted from the whole
        # caption corpus on every batch (like `AutoTokenizer.from_pretrained` per call).
        counts = Counter(w for c in self.corpus for w in split_words(c))
        known = {w: i for i, w in enumerate(self.clean.words)}
        vocab = sorted(set(counts) | set(known), key=lambda w: known.get(w, len(known)))
        return WordTokenizer(vocab, max_len=self.max_len).encode(captions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.clean, name)


@fault("tokenizer_per_batch", FAMILY, "an unexpectedly expensive calculation: the caption tokenizer is rebuilt "
       "on every batch", SECTION, ["perf.expensive_stage"], "condition.tokens", symptom="slow")
def _tokenizer_per_batch(p: ReferencePipeline) -> None:
    captions = [make_caption(clip_attributes(i)) for i in range(512)]
    corpus = [captions[i % len(captions)] for i in range(CORPUS)]
    p.tokenizer = _RebuiltTokenizer(p.tokenizer, corpus)  # type: ignore[assignment]


@fault("float_attention_mask", FAMILY, "an unexpectedly expensive calculation: a dense float attention mask "
       "[B, H, K*F, K*F] materialised every step", SECTION, ["perf.memory_peak"], "mask.padding", symptom="slow")
def _float_attention_mask(p: ReferencePipeline) -> None:
    padding_mask = p.padding_mask
    heads, k = p.cfg.heads, p.codec.n_codebooks

    def build(valid: np.ndarray, frames: int) -> torch.Tensor:
        padding = padding_mask(valid, frames)  # [B, F] bool
        keys = padding.repeat(1, k)  # [B, K*F] flattened codebooks
        # Bug: the mask is materialised as an additive float tensor per head, where a bool [B, T]
        # padding mask and `is_causal=True` would do; it is rebuilt on every step.
        dense = torch.zeros(padding.shape[0], heads, keys.shape[1], keys.shape[1])
        p._attention_mask = dense.masked_fill_(~keys[:, None, None, :], float("-inf"))  # type: ignore[attr-defined]
        return padding

    p.padding_mask = build  # type: ignore[method-assign]


@fault("logits_host_copy", FAMILY, "an unexpectedly expensive calculation: a per-step metric on a float64 host "
       "copy of the logits", SECTION, ["perf.memory_peak"], "loss", symptom="slow")
def _logits_host_copy(p: ReferencePipeline) -> None:
    compute_loss = p.compute_loss

    def with_metric(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> Any:
        # Bug: a training-accuracy metric copies the logits to the host in float64 every step and
        # compares full softmax rows with one-hot targets, where an argmax in the logits' dtype would do.
        probs = logits.detach().cpu().double().softmax(-1)  # [B, K, F, V] float64
        onehot = torch.nn.functional.one_hot(targets.clamp(0, logits.shape[-1] - 1), logits.shape[-1]).double()
        p._train_accuracy = float((probs * onehot).sum(-1)[mask].mean())  # type: ignore[attr-defined]
        return compute_loss(logits, targets, mask)

    p.compute_loss = with_metric  # type: ignore[method-assign]
