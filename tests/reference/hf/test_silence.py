"""The HF bed's silence faults: the audio's level, length and crop read off the taps, and the codes
compared with the clean bed's codes of the same audio."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_bed_support import check_registered, setup, trace

torch.set_num_threads(1)

NAMES = {"float_audio_divided_as_pcm", "dataset_rate_not_resampled", "crop_from_padded_batch",
         }
CODEC_ORDER = {"encode_codebooks_reversed", "decode_codebooks_reversed", "stereo_codes_concatenated"}


def _unscored(bed, name):
    from signalchain.reference.hf.faults._codec_order import UNSCORED

    p = bed.with_faults([])
    UNSCORED[name].apply(p)
    return p


def test_every_fault_is_registered_with_ids_and_a_known_stage() -> None:
    check_registered("silence", NAMES, "Silent or nearly silent output")


@pytest.fixture(scope="module")
def clean_trace(bed, golden):
    return trace(bed, setup(bed)[0], golden)


def _rms_db(x: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64))) + 1e-12))


def test_float_audio_divided_as_pcm_is_90_db_down(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["float_audio_divided_as_pcm"])
    t = trace(p, setup(p)[0], golden)
    assert np.array_equal(t.value("audio.original"), clean_trace.value("audio.original"))
    drop = _rms_db(clean_trace.value("audio.resampled")) - _rms_db(t.value("audio.resampled"))
    assert drop == pytest.approx(20 * np.log10(32768), abs=0.5)
    assert _rms_db(t.value("audio.cropped")) < -80


def test_dataset_rate_not_resampled_doubles_the_duration(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["dataset_rate_not_resampled"])
    t = trace(p, setup(p)[0], golden)
    rate_in, rate_out = t["audio.original"].sample_rate, t["audio.resampled"].sample_rate
    assert (rate_in, rate_out) == (32000, 16000)
    seconds = [n / rate_out for n in t["audio.resampled"].meta["lengths"]]
    clean = [n / rate_out for n in clean_trace["audio.resampled"].meta["lengths"]]
    source = [n / rate_in for n in t["audio.original"].meta["lengths"]]
    assert np.allclose(seconds, 2 * np.array(source)) and np.allclose(clean, source, rtol=1e-3)


def test_crop_from_padded_batch_crops_the_padding(bed, golden, clean_trace) -> None:
    p = bed.with_faults(["crop_from_padded_batch"])
    # the clips' own lengths at the codec rate, and the valid samples each crop keeps
    fault_valid, clean_valid = [], []
    for seed in range(4):
        batch = p.golden_batch(seed)
        t, c = trace(p, setup(p)[0], batch), trace(bed, setup(bed)[0], batch)
        lengths = np.asarray(t["crop"].meta["lengths"])
        bounds = np.asarray(t.value("crop"))
        assert (bounds[:, 1] > lengths).any()  # windows reach past clips that are long enough to hold them
        fault_valid += t["audio.cropped"].meta["lengths"]
        clean_valid += c["audio.cropped"].meta["lengths"]
    assert sum(fault_valid) < 0.8 * sum(clean_valid)
    assert min(fault_valid) == 0  # a crop wholly in the padding: pure silence


def test_encode_codebooks_reversed(bed, golden, clean_trace) -> None:
    p = _unscored(bed, "encode_codebooks_reversed")
    t = trace(p, setup(p)[0], golden)
    tokens, clean = np.asarray(t.value("tokens")), np.asarray(clean_trace.value("tokens"))
    assert np.array_equal(tokens, clean[:, ::-1]) and not np.array_equal(tokens, clean)


def _codes_reaching_the_codec(p, model, tokens: torch.Tensor) -> torch.Tensor:
    """The codes `p.decode` hands the codec's decoder (the tiny codec's untrained decoder barely
    depends on them, so the codes are compared, not the audio)."""
    codec, seen = model.audio_encoder, []
    original = codec.decode

    def keep(audio_codes: torch.Tensor, *args, **kwargs):
        seen.append(audio_codes.clone())
        return original(audio_codes, *args, **kwargs)

    codec.decode = keep
    try:
        p.decode(tokens, model)
    finally:
        del codec.decode
    return seen[0][0]  # [B, K, T]


def test_decode_codebooks_reversed(bed, clean_trace) -> None:
    p = _unscored(bed, "decode_codebooks_reversed")
    model = setup(p)[0]
    tokens = torch.from_numpy(np.asarray(clean_trace.value("tokens"))[:2])  # [B, K, T]
    assert torch.equal(_codes_reaching_the_codec(p, model, tokens), tokens.flip(1))
    assert torch.equal(_codes_reaching_the_codec(bed, model, tokens), tokens)


def test_stereo_codes_concatenated_lay_channels_side_by_side(bed, golden) -> None:
    from signalchain.reference.hf import HFBedConfig, HFBedPipeline
    from signalchain.reference.hf.tiny import TinyConfig

    clean = HFBedPipeline(HFBedConfig(tiny=TinyConfig(audio_channels=2)))
    p = _unscored(bed, "stereo_codes_concatenated")
    assert (p.num_codebooks, p.audio_channels) == (clean.num_codebooks, clean.audio_channels) == (8, 2)
    t = trace(p, setup(p)[0], golden)
    c = trace(clean, setup(clean)[0], golden)
    tokens, interleaved = np.asarray(t.value("tokens")), np.asarray(c.value("tokens"))
    left, right = interleaved[:, 0::2], interleaved[:, 1::2]
    assert np.array_equal(tokens, np.concatenate([left, right], axis=1))
    assert not np.array_equal(tokens, interleaved)
    assert not np.array_equal(left, right)  # the bed's clips are really stereo
