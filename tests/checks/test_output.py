"""The output judges on real files written here with a wrong scale, rate, subtype, channel phase or
header (each bug written in this file), and on hand-filled route and decoder records."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from signalchain.audio.measure import measure_file, wav_header
from signalchain.checks.output import judge_decoder, judge_file, judge_route
from signalchain.records.output import DecoderProbe, RouteMeasurement

SR = 16000


def _music(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    """A few decaying partials: something a listener would call a note, peak ≈ 0.5."""
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(seed)
    x = sum(rng.uniform(0.1, 0.2) * np.sin(2 * np.pi * f * t) for f in (220, 330, 440, 660)) * np.exp(-t)
    return (0.5 * x / np.abs(x).max()).astype(np.float32)


def _ids(path: Path, **expect: object) -> set[str]:
    return {f.id for f in judge_file(measure_file(path), **expect)}  # type: ignore[arg-type]


def test_a_well_written_file_is_silent(tmp_path: Path) -> None:
    for subtype in ("PCM_16", "PCM_24", "FLOAT"):
        path = tmp_path / f"ok_{subtype}.wav"
        sf.write(path, _music(), SR, subtype=subtype)
        assert judge_file(measure_file(path), expect_rate=SR) == []
    sf.write(tmp_path / "ok.flac", np.stack([_music(), _music(seed=1)], 1), SR)
    assert judge_file(measure_file(tmp_path / "ok.flac"), expect_rate=SR, expect_subtype="PCM_16") == []


def test_wrong_scale_quiet_silent_and_clipped(tmp_path: Path) -> None:
    x = _music()
    sf.write(tmp_path / "div.wav", x / 32768.0, SR, subtype="PCM_16")  # divided by 32768 before a PCM writer
    found = judge_file(measure_file(tmp_path / "div.wav"), decoded_dbfs=-15.0)
    assert {f.id for f in found} == {"output.silent", "output.scaled"}
    assert all(f.stage == "audio.written" for f in found)
    sf.write(tmp_path / "quiet.wav", x * 0.01, SR, subtype="PCM_16")  # -46 dBFS peak: quiet, not silent
    assert _ids(tmp_path / "quiet.wav") == {"output.scaled"}
    sf.write(tmp_path / "hot.wav", x * 40.0, SR, subtype="PCM_16")  # int16-range floats into a float writer
    assert _ids(tmp_path / "hot.wav") == {"output.clipped"}


def test_wrong_rate_and_subtype(tmp_path: Path) -> None:
    sf.write(tmp_path / "fast.wav", _music(), 2 * SR, subtype="PCM_16")
    found = judge_file(measure_file(tmp_path / "fast.wav"), expect_rate=SR)
    assert [f.id for f in found] == ["output.sample_rate"] and "2.00×" in found[0].message
    sf.write(tmp_path / "u8.wav", _music(), SR, subtype="PCM_U8")
    assert _ids(tmp_path / "u8.wav") == {"output.subtype"}
    sf.write(tmp_path / "s24.wav", _music(), SR, subtype="PCM_24")
    found = judge_file(measure_file(tmp_path / "s24.wav"), expect_subtype="PCM_16")
    assert [(f.id, f.severity.value) for f in found] == [("output.subtype", "error")]


def test_channels_out_of_phase(tmp_path: Path) -> None:
    x = _music()
    sf.write(tmp_path / "phase.wav", np.stack([x, -0.98 * x], 1), SR, subtype="PCM_16")  # right wire swapped
    found = judge_file(measure_file(tmp_path / "phase.wav"))
    assert [f.id for f in found] == ["audio.channel_cancel"] and "mono" in found[0].message


def test_a_header_that_lies_about_the_data(tmp_path: Path) -> None:
    """16-bit samples under a header patched to say 32-bit float (a byte edit, not a writer)."""
    path = tmp_path / "lie.wav"
    sf.write(path, _music(), SR, subtype="PCM_16")
    raw = bytearray(path.read_bytes())
    at = raw.index(b"fmt ") + 8
    tag, ch, rate, _, _, _ = struct.unpack("<HHIIHH", raw[at : at + 16])
    raw[at : at + 16] = struct.pack("<HHIIHH", 3, ch, rate, rate * ch * 4, ch * 4, 32)
    path.write_bytes(bytes(raw))
    head = wav_header(path)
    assert head is not None and head.format_tag == 3 and head.bits == 32
    rep = measure_file(path)
    found = judge_file(rep, expect_rate=SR)
    assert [f.id for f in found] == ["output.header"]
    assert rep.reread is not None and rep.reread["plausible"] and "PCM_16" in found[0].message


def test_an_unreadable_file_is_one_finding_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.wav"
    path.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnothing here")
    found = judge_file(measure_file(path))
    assert [f.id for f in found] == ["file.unreadable"] and str(path) in found[0].message


def _route(**kw: object) -> RouteMeasurement:
    base = dict(tokens_shape=[2, 4, 25], cardinality=256, invalid=0, special=[], silence_pattern=[0, 0, 0, 0],
                silent_frames=0.02, decoded_dbfs=[-18.0, -20.0], decoded_rate=SR)
    base.update(kw)
    return RouteMeasurement(**base)  # type: ignore[arg-type]


def test_route_judge_blames_the_first_hop() -> None:
    assert judge_route(_route()) == []
    found = judge_route(_route(invalid=12, special=[256], error="ValueError: codes must lie in [0, 255]"))
    assert [(f.id, f.stage) for f in found] == [("generation.invalid_tokens", "generation")]
    found = judge_route(_route(silent_frames=1.0, decoded_dbfs=[-120.0, -120.0]))
    assert [(f.id, f.stage) for f in found] == [("generation.silent", "generation")]
    found = judge_route(_route(decoded_dbfs=[-120.0, -120.0]))
    assert [(f.id, f.stage) for f in found] == [("output.silent", "audio.decoded")]


def test_route_judge_merges_files_with_the_same_problem(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"s{i}.wav")
        sf.write(paths[-1], _music(seed=i), 2 * SR, subtype="PCM_16")
    found = judge_route(_route(files=[measure_file(p) for p in paths], decoded_dbfs=[-18.0] * 3))
    assert [f.id for f in found] == ["output.sample_rate"]
    assert "2 more of the 3" in found[0].message and len(found[0].evidence["files"]) == 3


@pytest.mark.parametrize("far, fires", [(0.03, False), (0.97, True), (None, False)])
def test_decoder_judge(far: float | None, fires: bool) -> None:
    found = judge_decoder(DecoderProbe(frames=100, changed=[20, 50, 80], far_share=far, window=6))
    assert [(f.id, f.stage) for f in found] == ([("tokens.codebook_order", "audio.decoded")] if fires else [])


@pytest.mark.parametrize("gaps, fires", [
    ([46.3, 32.4, 47.4], True),  # a codec at random weights (the real-bug bed: xcodec#3)
    ([-35.0, -41.0], True),  # a decode that drops its scale
    ([0.0, -0.6, -0.9], False),  # a fitted codec
    ([0.3, -13.2, -11.9], False),  # a tiny random EnCodec: level within 30 dB, not judged on level
    ([46.0, 2.0], False),  # one example off: not every example
    ([46.0], False),  # one example is not enough
])
def test_a_round_trip_far_from_its_input_level_is_named_before_the_layout(gaps, fires) -> None:
    found = judge_decoder(DecoderProbe(frames=100, changed=[20], far_share=0.97, window=6,
                                       round_trip_stage="audio.cropped", round_trip_db=gaps,
                                       round_trip_similarity=[0.1] * len(gaps)))
    assert [f.id for f in found] == (["codec.round_trip"] if fires else ["tokens.codebook_order"])


# ---- float overshoot: values beyond ±1 that a PCM writer or a player will clip ------------------------

def test_a_float_file_beyond_full_scale_is_an_overshoot_with_its_numbers(tmp_path: Path) -> None:
    from _overshoot import hot

    x = hot(peak_db=7.8, share=0.0017)
    sf.write(tmp_path / "hot.wav", x, SR, subtype="FLOAT")
    (f,) = judge_file(measure_file(tmp_path / "hot.wav"))
    over = int((np.abs(x) > 1 + 2**-15).sum())
    assert (f.id, f.severity.value, f.stage) == ("audio.overshoot", "warning", "audio.written")
    assert f.evidence["peak_dbfs"] == pytest.approx(7.8, abs=0.01)
    assert f.evidence["beyond_full_scale"] == over and f.evidence["fraction"] == pytest.approx(over / x.size)
    assert f.evidence["fraction"] == pytest.approx(0.0017, abs=5e-5)
    assert "+7.8 dBFS" in f.message and "0.17% of samples" in f.message and f"{over:,} of {x.size:,}" in f.message
    assert "clips them" in f.message and "wraps them" in f.message
    assert "gain -7.8 dB" in f.hint and f"{1 / np.abs(x).max():.3g}" in f.hint  # computed from the peak
    # what the hint says a 16-bit writer does is what soundfile does
    sf.write(tmp_path / "hot16.wav", x, SR, subtype="PCM_16")
    y, _ = sf.read(tmp_path / "hot16.wav")
    assert np.abs(y).max() <= 1.0 and (np.abs(y) >= 32767 / 32768).sum() >= over


def test_float_files_within_full_scale_are_silent(tmp_path: Path) -> None:
    from _overshoot import clean

    for peak_db in (-1.0, 0.0):  # a file normalised to exactly full scale is not an overshoot
        sf.write(tmp_path / "ok.wav", clean(peak_db), SR, subtype="FLOAT")
        assert judge_file(measure_file(tmp_path / "ok.wav")) == []
    sf.write(tmp_path / "ok64.wav", clean(-1.0).astype(np.float64), SR, subtype="DOUBLE")
    assert judge_file(measure_file(tmp_path / "ok64.wav")) == []


def test_overshoot_and_clipping_keep_apart(tmp_path: Path) -> None:
    from _overshoot import hot

    x = hot(peak_db=7.8, share=0.0017)
    # the same samples clipped before a float writer: stuck at full scale, not beyond it
    sf.write(tmp_path / "clipped.wav", np.clip(x * 4, -1, 1), SR, subtype="FLOAT")
    assert _ids(tmp_path / "clipped.wav") == {"output.clipped"}
    # a gain applied twice into a float writer: far beyond full scale (not "at" it): an error past 1 %
    sf.write(tmp_path / "gain_twice.wav", _music() * 40.0, SR, subtype="FLOAT")
    (f,) = judge_file(measure_file(tmp_path / "gain_twice.wav"))
    assert (f.id, f.severity.value) == ("audio.overshoot", "error") and f.evidence["fraction"] > 0.5
    # a PCM file cannot hold an overshoot: what its writer clipped is output.clipped, as before
    sf.write(tmp_path / "int16.wav", _music() * 40.0, SR, subtype="PCM_16")
    assert _ids(tmp_path / "int16.wav") == {"output.clipped"}


def test_a_fresh_models_render_that_overshoots_is_info(tmp_path: Path) -> None:
    from _overshoot import hot

    sf.write(tmp_path / "render.wav", hot(), SR, subtype="FLOAT")
    route = RouteMeasurement([1, 4, 50], 64, 0, [], None, None, decoded_dbfs=[-20.0], decoded_rate=SR,
                             files=[measure_file(tmp_path / "render.wav")])
    (f,) = judge_route(route)
    assert (f.id, f.severity.value) == ("audio.overshoot", "info") and "fresh, untrained model" in f.message
