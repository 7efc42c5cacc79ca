"""The silence faults: each loses the sound at its own hop between the source file and the player.

Symptoms are measured directly on taps, codes and the written files (read back with soundfile
here, independently of the pipeline's own `read_back`), never through a signalchain detector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.signal
import soundfile as sf
import torch

from signalchain import record, tap
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig
from signalchain.reference.faults import catalogue, get_fault

torch.set_num_threads(1)

CFG = RefConfig(batch_size=4)
SAMPLING = {"max_frames": 25}
NAMES = {"crop_in_padding", "stereo_phase_cancel", "codebooks_swapped", "audio_scaled_twice",
         "stereo_load_error_zeros", "codec_input_rescaled", "generation_pattern_not_reverted",
         "generation_silence_only", "decode_codes_reshaped", "output_int16_range_float",
         "output_divided_twice", "output_dataset_rate", "output_8bit", "wav_header_mismatch"}
FAULTS = [f.name for f in catalogue("silence")]
OUTPUT_ROUTE = {"generation_pattern_not_reverted", "generation_silence_only", "decode_codes_reshaped",
                "output_int16_range_float", "output_divided_twice", "output_dataset_rate", "output_8bit",
                "wav_header_mismatch"}


@pytest.fixture(scope="module")
def clean() -> ReferencePipeline:
    return ReferencePipeline(CFG)


@pytest.fixture(scope="module")
def model(clean: ReferencePipeline) -> Any:
    """A fresh model: its generated audio is noise-like, never silent."""
    return clean.build_model(0)


def _rms_dbfs(x: np.ndarray) -> np.ndarray:
    """Per example of [B, C, T] (or per clip of a list of [C, T])."""
    return np.array([10 * np.log10(np.mean(np.square(c, dtype=np.float64)) + 1e-30) for c in x])


def _step_trace(p: ReferencePipeline, model: Any) -> Any:
    with record(values=True) as t:
        p.step(model, p.golden_batch(0), tap)
    return t


def _render(p: ReferencePipeline, model: Any, folder: Path) -> tuple[Any, list[Path]]:
    with record(values=True) as t:
        paths = p.render(model, p.golden_batch(0), folder, SAMPLING, tap)
    return t, paths


@pytest.fixture(scope="module")
def clean_render(
    clean: ReferencePipeline, model: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, list[Path]]:
    return _render(clean, model, tmp_path_factory.mktemp("clean"))


# ---- registration ---------------------------------------------------------------------------------

def test_every_route_to_silence_has_a_fault() -> None:
    assert NAMES <= set(FAULTS)
    for name in FAULTS:
        f = get_fault(name)
        assert f.family == "silence" and f.expected_ids and f.expected_stage and f.cause
        assert f.section == "Silent or nearly silent output" and f.symptom == "silent"
    assert {get_fault(n).expected_stage for n in OUTPUT_ROUTE} <= {"generation", "audio.decoded", "audio.written"}


@pytest.mark.parametrize("name", sorted(set(FAULTS) - OUTPUT_ROUTE))
def test_the_faulty_pipeline_builds_and_steps(name: str, model: Any) -> None:
    p = ReferencePipeline(CFG, [name])
    assert torch.isfinite(p.step(model, p.golden_batch(0)).loss)


@pytest.mark.parametrize("name", sorted(OUTPUT_ROUTE - {"generation_pattern_not_reverted"}))
def test_the_faulty_output_route_renders(name: str, model: Any, tmp_path: Path) -> None:
    p = ReferencePipeline(CFG, [name])
    t, paths = _render(p, model, tmp_path)
    assert len(paths) == CFG.batch_size and all(path.exists() for path in paths)
    assert "audio.written" in t


# ---- 1. source audio ------------------------------------------------------------------------------

def test_audio_scaled_twice_puts_the_source_near_minus_100_dbfs(clean: ReferencePipeline, model: Any) -> None:
    t = _step_trace(ReferencePipeline(CFG, ["audio_scaled_twice"]), model)
    assert (_rms_dbfs(t.value("audio.original")[:, :1]) < -90).all()
    assert (_rms_dbfs(_step_trace(clean, model).value("audio.original")[:, :1]) > -40).all()


def test_stereo_load_error_zeros_silences_every_stereo_clip(model: Any) -> None:
    p = ReferencePipeline(CFG, ["stereo_load_error_zeros"])
    batch = p.golden_batch(0)
    t = _step_trace(p, model)
    audio = t.value("audio.original")  # [B, 2, T]
    stereo = np.array([c.shape[0] == 2 for c in batch.clips])
    assert stereo.any() and (~stereo).any()
    assert not audio[stereo].any()  # digital silence
    assert (_rms_dbfs(audio[~stereo]) > -40).all()


# ---- 4. codec tokens ------------------------------------------------------------------------------

def _silent_frame_share(t: Any, silence: np.ndarray) -> float:
    tokens = t.value("tokens")  # [B, K, F]
    return float((tokens == silence[None, :, None]).all(axis=1).mean())


def test_codec_input_rescaled_encodes_every_frame_as_silence(clean: ReferencePipeline, model: Any) -> None:
    silence = clean.codec.silence_codes
    t = _step_trace(ReferencePipeline(CFG, ["codec_input_rescaled"]), model)
    assert (_rms_dbfs(t.value("audio.cropped")) > -45).all()  # the audio reaching the codec is fine
    assert _silent_frame_share(t, silence) == 1.0
    assert _silent_frame_share(_step_trace(clean, model), silence) < 0.3  # only the padding


# ---- 5. generated tokens --------------------------------------------------------------------------

def test_generation_pattern_not_reverted_emits_the_special_token(clean: ReferencePipeline, model: Any,
                                                                  tmp_path: Path) -> None:
    p = ReferencePipeline(CFG, ["generation_pattern_not_reverted"])
    card = p.codec.cardinality
    with record(values=True) as t, pytest.raises(ValueError, match=rf"codes must lie in \[0, {card - 1}\]"):
        p.render(model, p.golden_batch(0), tmp_path, SAMPLING, tap)  # the decoder refuses them
    codes = t.value("generation.tokens")  # [B, K, T]
    assert (codes[:, 1:, 0] == card).all() and (codes[:, 0] < card).all()
    assert int(clean.generate(model, clean.golden_batch(0), SAMPLING).codes.max()) < card


def test_generation_silence_only_writes_digital_silence(clean: ReferencePipeline, model: Any, tmp_path: Path,
                                                        clean_render: tuple[Any, list[Path]]) -> None:
    t, paths = _render(ReferencePipeline(CFG, ["generation_silence_only"]), model, tmp_path)
    codes = t.value("generation.tokens")
    assert (codes == clean.codec.silence_codes[None, :, None]).all()
    assert all(not sf.read(str(path))[0].any() for path in paths)
    assert all(np.abs(sf.read(str(path))[0]).max() > 0.5 for path in clean_render[1])


# ---- 6. decoder input shape -----------------------------------------------------------------------

def _round_trip_similarity(p: ReferencePipeline) -> list[float]:
    """Log-spectrogram correlation between cropped audio and decode(its own codes)."""
    cropped, _, _ = p.prepare_audio(p.golden_batch(0), lambda stage, value, **meta: value)
    decoded = p.decode(p.encode_tokens(cropped)).numpy()

    def spec(x: np.ndarray) -> np.ndarray:
        return np.log10(np.abs(scipy.signal.stft(x.ravel(), nperseg=640, noverlap=320)[2]) ** 2 + 1e-8)

    n = decoded.shape[-1]
    return [float(np.corrcoef(spec(cropped[i, :, :n]).ravel(), spec(decoded[i]).ravel())[0, 1])
            for i in range(len(decoded))]


def test_decode_codes_reshaped_garbles_the_decoded_audio(clean: ReferencePipeline) -> None:
    assert max(_round_trip_similarity(ReferencePipeline(CFG, ["decode_codes_reshaped"]))) < 0.35
    assert min(_round_trip_similarity(clean)) > 0.55


# ---- 7. amplitude before writing ------------------------------------------------------------------

def test_output_int16_range_float_clips_the_file(model: Any, tmp_path: Path,
                                                 clean_render: tuple[Any, list[Path]]) -> None:
    _, paths = _render(ReferencePipeline(CFG, ["output_int16_range_float"]), model, tmp_path)

    def clipped(path: Path) -> float:
        return float((np.abs(sf.read(str(path))[0]) >= 0.999).mean())

    assert min(clipped(p) for p in paths) > 0.5
    assert max(clipped(p) for p in clean_render[1]) < 0.01


def test_output_divided_twice_writes_near_silence(model: Any, tmp_path: Path,
                                                  clean_render: tuple[Any, list[Path]]) -> None:
    t, paths = _render(ReferencePipeline(CFG, ["output_divided_twice"]), model, tmp_path)
    assert (_rms_dbfs(t.value("audio.decoded")) > -40).all()  # the render itself is fine
    assert max(np.abs(sf.read(str(p), dtype="int16")[0]).max() for p in paths) <= 1  # +-1 LSB
    assert min(np.abs(sf.read(str(p))[0]).max() for p in clean_render[1]) > 0.5


# ---- 8 and 9. rate, subtype, header ---------------------------------------------------------------

def test_output_dataset_rate_writes_a_32_khz_header(model: Any, tmp_path: Path,
                                                    clean_render: tuple[Any, list[Path]]) -> None:
    t, paths = _render(ReferencePipeline(CFG, ["output_dataset_rate"]), model, tmp_path)
    decoded = t.value("audio.decoded")
    for path in paths:
        info = sf.info(str(path))
        assert info.samplerate == 32000 and info.frames == decoded.shape[-1]
        assert info.duration == pytest.approx(decoded.shape[-1] / 16000 / 2)  # plays twice as fast
    assert {sf.info(str(p)).samplerate for p in clean_render[1]} == {16000}


def test_output_8bit_writes_pcm_u8(model: Any, tmp_path: Path, clean_render: tuple[Any, list[Path]]) -> None:
    def quantisation_snr_db(t: Any, paths: list[Path], p: ReferencePipeline) -> float:
        decoded = t.value("audio.decoded")
        ref = np.stack([p.normalize_output(x) for x in decoded])  # what was meant to be written
        written = np.stack([sf.read(str(path), always_2d=True)[0].T for path in paths])
        return float(10 * np.log10(np.sum(ref**2) / np.sum((written - ref) ** 2)))

    p = ReferencePipeline(CFG, ["output_8bit"])
    t, paths = _render(p, model, tmp_path)
    assert {sf.info(str(path)).subtype for path in paths} == {"PCM_U8"}
    assert quantisation_snr_db(t, paths, p) < 40
    assert quantisation_snr_db(*clean_render, ReferencePipeline(CFG)) > 70


def test_wav_header_mismatch_is_misread_by_the_player(model: Any, tmp_path: Path,
                                                      clean_render: tuple[Any, list[Path]]) -> None:
    t, paths = _render(ReferencePipeline(CFG, ["wav_header_mismatch"]), model, tmp_path)
    samples = t.value("audio.decoded").shape[-1]
    for path in paths:
        assert sf.info(str(path)).subtype == "FLOAT"
        data, rate = sf.read(str(path), dtype="float32")
        assert rate == 16000 and len(data) == samples // 2  # two int16 samples per "float"
        with np.errstate(invalid="ignore"):
            finite = data[np.isfinite(data)]
        assert (~np.isfinite(data)).any() or np.abs(finite).max() > 1e3
        assert (np.abs(finite) < 1e-20).mean() > 0.2  # and much of the rest is denormal silence
    for path in clean_render[1]:
        data, _ = sf.read(str(path), dtype="float32")
        assert len(data) == samples and np.isfinite(data).all() and np.abs(data).max() <= 1.0
