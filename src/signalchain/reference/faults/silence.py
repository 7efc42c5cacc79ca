"""Silent or nearly silent output: where the sound is lost between the file and the speaker."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile as sf
import torch

from ..generate import GenerationResult, SamplingConfig
from ..pattern import build_delay_pattern
from ._registry import fault

if TYPE_CHECKING:
    from ..pipeline import Batch, ReferencePipeline

SECTION = "Silent or nearly silent output"


# ---- silence: where a crop, a downmix or a scale loses the sound ---------------------------------

@fault("crop_in_padding", "silence", "the crop selects an empty or padded region", "Silent or nearly silent output",
       ["crop.in_padding"], "crop", symptom="silent")
def _crop_in_padding(p: ReferencePipeline) -> None:
    def choose_crops(lengths: np.ndarray, segment: int, rng: np.random.Generator) -> np.ndarray:
        # Bug: the window is placed relative to the padded batch length, not the clip's own length,
        # so short clips are cropped from the zero padding at their end.
        total = int(lengths.max())
        starts = np.full(len(lengths), max(total - segment, 0), dtype=np.int64)
        return np.stack([starts, starts + segment], axis=1)

    p.choose_crops = choose_crops  # type: ignore[method-assign]


@fault("stereo_phase_cancel", "silence", "channel conversion cancels the waveform", "Silent or nearly silent output",
       ["audio.channel_cancel"], "audio.mono", symptom="silent")
def _stereo_phase_cancel(p: ReferencePipeline) -> None:
    def to_mono(audio: np.ndarray) -> np.ndarray:
        # Bug: the right channel is read with inverted polarity (a sign error in an M/S decode),
        # so the downmix subtracts the channels and correlated content cancels.
        return (audio[:, :1] - audio[:, 1:2]) / 2.0

    p.to_mono = to_mono  # type: ignore[method-assign]


# ---- step boundaries: what AudioCraft's solver checks ---------------------------------------------

@fault("codebooks_swapped", "silence", "the decoder receives the wrong shape or codebook order",
       "Silent or nearly silent output", ["tokens.codebook_order"], "tokens", symptom="silent")
def _codebooks_swapped(p: ReferencePipeline) -> None:
    encode = p.encode_tokens

    def encode_tokens(cropped: np.ndarray) -> torch.Tensor:
        # Bug: codes are transposed from the codec's [B, F, K] layout with the wrong permutation
        # order, which here reverses the codebook axis: the finest codebook is trained as the coarsest.
        return encode(cropped).flip(1)

    p.encode_tokens = encode_tokens  # type: ignore[method-assign]


# ---- 1. source audio is silent or incorrectly normalised ------------------------------------------

@fault("audio_scaled_twice", "silence", "the source audio is incorrectly normalised", SECTION,
       ["audio.scale", "audio.silent"], "audio.original", symptom="silent")
def _audio_scaled_twice(p: ReferencePipeline) -> None:
    def load_clips(batch: Batch) -> list[np.ndarray]:
        # Bug: the loader was written for int16 PCM (`sf.read(dtype="int16") / 32768`), but the
        # reader now returns float32 in [-1, 1]: dividing again puts every clip near -100 dBFS.
        return [c / 32768.0 for c in batch.clips]

    p.load_clips = load_clips  # type: ignore[method-assign]


@fault("stereo_load_error_zeros", "silence", "the loader returns silence for some source clips", SECTION,
       ["audio.silent"], "audio.original", symptom="silent")
def _stereo_load_error_zeros(p: ReferencePipeline) -> None:
    def decode(clip: np.ndarray) -> np.ndarray:
        if clip.shape[0] != 1:  # a mono-only fast path
            raise ValueError(f"expected mono audio, got {clip.shape[0]} channels")
        return clip

    def load_clips(batch: Batch) -> list[np.ndarray]:
        out = []
        for clip in batch.clips:
            try:
                out.append(decode(clip))
            except ValueError:
                # Bug: an except-clause meant to skip corrupt files substitutes silence and goes
                # on quietly; the mono-only decoder raises on every stereo clip, so half the
                # dataset trains as digital silence.
                out.append(np.zeros_like(clip))
        return out

    p.load_clips = load_clips  # type: ignore[method-assign]


# ---- 4. codec tokens represent silence -------------------------------------------------------------

@fault("codec_input_rescaled", "silence", "the codec tokens represent silence", SECTION,
       ["tokens.silence_dominant"], "tokens", symptom="silent")
def _codec_input_rescaled(p: ReferencePipeline) -> None:
    def encode_tokens(cropped: np.ndarray) -> torch.Tensor:
        # Bug: the codec wrapper "normalises int16 input" (x / 32768) although the audio reaching it
        # is already float: every frame falls below the codec's silence gate and gets the silence code.
        return torch.from_numpy(p.codec.encode(cropped / 32768.0))  # [B, K, F]

    p.encode_tokens = encode_tokens  # type: ignore[method-assign]


# ---- 5. generated tokens are invalid or dominated by a silence token pattern -----------------------

@fault("generation_pattern_not_reverted", "silence", "the generated tokens are invalid", SECTION,
       ["generation.invalid_tokens"], "generation", symptom="silent")
def _generation_pattern_not_reverted(p: ReferencePipeline) -> None:
    sample = p.sample_codes

    def sample_codes(model: Any, cond: torch.Tensor, cond_mask: torch.Tensor, cfg: SamplingConfig) -> GenerationResult:
        result = sample(model, cond, cond_mask, cfg)
        pattern = build_delay_pattern(result.codes, model.special_token)  # the sampler's buffer [B, K, T + K - 1]
        # Bug: the sampler returns the first T steps of its delay-pattern buffer instead of reverting
        # the pattern: codebook k is shifted by k frames and starts with k special tokens
        # (id == cardinality), which the decoder cannot decode.
        return replace(result, codes=pattern[:, :, : result.codes.shape[-1]].clone())

    p.sample_codes = sample_codes  # type: ignore[method-assign]


@fault("generation_silence_only", "silence", "the generated tokens are all the silence pattern", SECTION,
       ["generation.silent"], "generation", symptom="silent")
def _generation_silence_only(p: ReferencePipeline) -> None:
    sample = p.sample_codes
    silence = torch.as_tensor(p.codec.silence_codes)  # [K]
    allowed = torch.ones(p.codec.n_codebooks, p.codec.cardinality, dtype=torch.bool)  # [K, C]
    allowed[torch.arange(len(silence)), silence] = False

    def forbid_silence(module: torch.nn.Module, args: Any, logits: torch.Tensor) -> torch.Tensor:
        # Bug: a logits processor meant to stop the model emitting the silence code calls
        # masked_fill (which fills where the mask is True) with the *allowed* mask: only the
        # silence code survives, every frame is silence.
        return logits.masked_fill(allowed[None, :, None, :], -1e9)  # [B, K, S, C]

    def sample_codes(model: Any, cond: torch.Tensor, cond_mask: torch.Tensor, cfg: SamplingConfig) -> GenerationResult:
        handle = model.register_forward_hook(forbid_silence)
        try:
            return sample(model, cond, cond_mask, cfg)
        finally:
            handle.remove()

    p.sample_codes = sample_codes  # type: ignore[method-assign]


# ---- 6. the decoder receives the wrong shape -------------------------------------------------------

@fault("decode_codes_reshaped", "silence", "the decoder receives the wrong shape or codebook order", SECTION,
       ["tokens.codebook_order"], "audio.decoded", symptom="silent")
def _decode_codes_reshaped(p: ReferencePipeline) -> None:
    def decode(tokens: Any) -> torch.Tensor:
        codes = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else np.asarray(tokens)
        B, K, T = codes.shape
        frames_first = np.ascontiguousarray(codes.transpose(0, 2, 1))  # [B, T, K], as the token cache stores them
        # Bug: turned back into [B, K, T] with reshape instead of transpose: each "codebook" row
        # now interleaves codes of all four codebooks and of four different frames.
        return torch.from_numpy(p.codec.decode(frames_first.reshape(B, K, T)))  # [B, 1, T * hop]

    p.decode = decode  # type: ignore[method-assign]


# ---- 7. amplitude values are scaled incorrectly before file writing --------------------------------

@fault("output_int16_range_float", "silence", "the amplitude is scaled incorrectly before writing", SECTION,
       ["output.clipped"], "audio.written", symptom="silent")
def _output_int16_range_float(p: ReferencePipeline) -> None:
    normalize = p.normalize_output

    def normalize_output(audio: np.ndarray) -> np.ndarray:
        # Bug: scaled to the int16 range for a 16-bit file but never cast to int16: soundfile takes
        # float samples as [-1, 1] and clips everything beyond, leaving a full-scale square wave.
        return normalize(audio) * 32767.0

    p.normalize_output = normalize_output  # type: ignore[method-assign]


@fault("output_divided_twice", "silence", "the amplitude is scaled incorrectly before writing", SECTION,
       ["output.scaled", "output.silent"], "audio.written", symptom="silent")
def _output_divided_twice(p: ReferencePipeline) -> None:
    normalize = p.normalize_output

    def normalize_output(audio: np.ndarray) -> np.ndarray:
        # Bug: converts "to PCM" with the reader's int -> float formula (x / 32768), then hands the
        # floats to soundfile, which scales to 16 bits itself: peaks land at about one LSB.
        return normalize(audio) / 32768.0

    p.normalize_output = normalize_output  # type: ignore[method-assign]


# ---- 8 and 9. the file's sample rate or subtype is wrong; the player misreads it --------------------

def _write_each(p: ReferencePipeline, audio: np.ndarray, folder: str | Path,
                write: Callable[[Path, np.ndarray], None]) -> list[Path]:
    """write_output's loop (normalise each example, one file each) with a replaceable file writer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, x in enumerate(np.asarray(audio, dtype=np.float32)):
        path = folder / f"sample_{i:02d}.wav"
        write(path, p.normalize_output(x))  # x, y: [C, T]
        paths.append(path)
    return paths


@fault("output_dataset_rate", "silence", "the output file has the wrong sample rate", SECTION,
       ["output.sample_rate"], "audio.written", symptom="silent")
def _output_dataset_rate(p: ReferencePipeline) -> None:
    def write_output(audio: np.ndarray, folder: str | Path) -> list[Path]:
        # Bug: the writer takes the dataset's rate (32 kHz, what the clips are stored at), not the
        # model's 16 kHz: players run the audio at twice the speed, an octave up.
        return _write_each(p, audio, folder, lambda path, y: sf.write(str(path), y.T, p.cfg.source_sample_rate,
                                                                       subtype="PCM_16"))

    p.write_output = write_output  # type: ignore[method-assign]


@fault("output_8bit", "silence", "the output file has the wrong subtype", SECTION,
       ["output.subtype"], "audio.written", symptom="silent")
def _output_8bit(p: ReferencePipeline) -> None:
    def write_output(audio: np.ndarray, folder: str | Path) -> list[Path]:
        # Bug: the subtype comes from the config of the 8-bit preview files (PCM_U8, 48 dB of
        # dynamic range): quiet passages quantise to a few levels or to silence, the rest hisses.
        return _write_each(p, audio, folder, lambda path, y: sf.write(str(path), y.T, p.cfg.sample_rate,
                                                                       subtype="PCM_U8"))

    p.write_output = write_output  # type: ignore[method-assign]


def _write_wav_wrong_header(path: Path, y: np.ndarray, sample_rate: int) -> None:
    """A hand-rolled WAV writer: 16-bit PCM data under a header copied from the float writer."""
    channels = y.shape[0]
    pcm = np.clip(np.round(y.T * 32767.0), -32768, 32767).astype("<i2").tobytes()  # interleaved [T, C]
    # Bug: the header constants come from the float32 writer (format tag 3 = IEEE float, 32 bits),
    # the data chunk holds int16: a player decodes each pair of samples as one float32.
    fmt = struct.pack("<HHIIHH", 3, channels, sample_rate, sample_rate * channels * 4, channels * 4, 32)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(pcm)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
        f.write(b"data" + struct.pack("<I", len(pcm)) + pcm)


@fault("wav_header_mismatch", "silence", "playback software reads the file incorrectly", SECTION,
       ["output.header"], "audio.written", symptom="silent")
def _wav_header_mismatch(p: ReferencePipeline) -> None:
    def write_output(audio: np.ndarray, folder: str | Path) -> list[Path]:
        return _write_each(p, audio, folder, lambda path, y: _write_wav_wrong_header(path, y, p.cfg.sample_rate))

    p.write_output = write_output  # type: ignore[method-assign]
