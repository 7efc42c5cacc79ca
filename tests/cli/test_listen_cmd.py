"""`signalchain listen` on real files written with a wrong scale, rate, subtype, channel phase and
header; bad files are one finding each and the rest go on."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from signalchain.cli import cli

SR = 16000


def _note(seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (0.4 * np.sin(2 * np.pi * 330 * t) * np.exp(-2 * t)).astype(np.float32)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    x = _note()
    sf.write(tmp_path / "good.wav", x, SR, subtype="PCM_16")
    sf.write(tmp_path / "good.flac", x, SR)
    sf.write(tmp_path / "tiny.wav", x / 32768.0, SR, subtype="PCM_16")  # scaled down twice
    sf.write(tmp_path / "fast.wav", x, 2 * SR, subtype="PCM_16")  # the dataset's rate
    sf.write(tmp_path / "coarse.wav", x, SR, subtype="PCM_U8")  # an 8-bit preview preset
    sf.write(tmp_path / "phase.wav", np.stack([x, -x], 1), SR, subtype="PCM_16")  # one wire inverted
    lie = tmp_path / "lie.wav"  # 16-bit data, header says 32-bit float
    sf.write(lie, x, SR, subtype="PCM_16")
    raw = bytearray(lie.read_bytes())
    at = raw.index(b"fmt ") + 8
    raw[at : at + 16] = struct.pack("<HHIIHH", 3, 1, SR, SR * 4, 4, 32)
    lie.write_bytes(bytes(raw))
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunk")
    (tmp_path / "notes.txt").write_text("not audio, not looked at")
    return tmp_path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["listen", *args])
    return result.exit_code, result.output


def test_listen_finds_each_bad_file_and_goes_on(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("out")
    code, text = _run(str(folder), "--rate", str(SR), "--json", str(out / "r.json"), "--html", str(out / "r.html"))
    assert code == 1, text
    report = json.loads((out / "r.json").read_text())
    by_file: dict[str, set[str]] = {}
    for f in report["findings"]:
        by_file.setdefault(Path(f["evidence"]["path"]).name, set()).add(f["id"])
    assert by_file == {"tiny.wav": {"output.silent"}, "fast.wav": {"output.sample_rate"},
                       "coarse.wav": {"output.subtype"}, "phase.wav": {"audio.channel_cancel"},
                       "lie.wav": {"output.header"}, "broken.wav": {"file.unreadable"}}
    assert len(report["files"]) == 8 and report["expected_rate"] == SR
    assert all(f["stage"] == "audio.written" for f in report["findings"])
    page = (out / "r.html").read_text()
    assert page.count("<audio") == 7 and page.count("data:image/png") >= 7  # every readable file: player + picture
    assert "broken.wav" in page and "output.header" in page


def test_listen_clean_files_exit_zero(folder: Path) -> None:
    code, text = _run(str(folder / "good.wav"), str(folder / "good.flac"), "--rate", str(SR), "--subtype", "pcm_16")
    assert code == 0, text
    assert "good.flac" in text


def test_listen_expected_subtype_and_missing_paths(folder: Path) -> None:
    (folder / "gone.wav").symlink_to(folder / "nowhere.wav")  # missing inside a folder: a finding, the rest goes on
    code, text = _run(str(folder), "--subtype", "FLOAT")
    assert code == 1 and "file.missing" in text and "output.subtype" in text
    code, text = _run(str(folder / "good.wav"), str(folder / "nowhere.wav"))  # named: a usage error, nothing run
    assert code == 2 and text == f"signalchain: error: {folder / 'nowhere.wav'}: no such file or folder; give audio " \
        "files (.aif, .aiff, .flac, .mp3, .ogg, .opus, .wav) or folders of them\n"


def test_listen_usage_errors(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    code, text = _run(str(folder), "--subtype", "PCM_17")
    assert code == 2 and "not a soundfile subtype" in text
    code, text = _run(str(folder), "--rate", "0")
    assert code == 2 and "--rate must be a positive" in text
    empty = tmp_path_factory.mktemp("empty")
    code, text = _run(str(empty))
    assert code == 2 and "no audio files" in text


def test_listen_judges_a_float_overshoot_and_draws_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's file: a float WAV at +7.8 dBFS, 0.17% of it past full scale, was 'No findings' and drawn
    clipped to ±1. Now a warning with its numbers (exit 0: nothing is an error) and a waveform that shows it."""
    from _overshoot import clean, hot
    from signalchain.report import listen_page

    sf.write(tmp_path / "render.wav", hot(peak_db=7.8, share=0.0017), SR, subtype="FLOAT")
    sf.write(tmp_path / "fine.wav", clean(-1.0), SR, subtype="FLOAT")
    drawn: dict[str, float] = {}
    real = listen_page.audio_figure

    def spy(audio: np.ndarray, sr: int | None, title: str = "") -> bytes:
        drawn[Path(title).name] = float(np.abs(audio).max())
        return real(audio, sr, title)

    monkeypatch.setattr(listen_page, "audio_figure", spy)
    out = tmp_path / "r.json"
    code, text = _run(str(tmp_path), "--json", str(out), "--html", str(tmp_path / "r.html"))
    assert code == 0, text
    (f,) = json.loads(out.read_text())["findings"]
    assert (f["id"], f["severity"], Path(f["evidence"]["path"]).name) == ("audio.overshoot", "warning", "render.wav")
    assert "+7.8 dBFS" in f["message"] and "0.17% of samples" in f["message"] and "gain -7.8 dB" in f["hint"]
    assert "0.17%" in text
    assert drawn["render.wav"] == pytest.approx(10 ** (7.8 / 20), rel=1e-4)  # the page draws what the file holds
    assert drawn["fine.wav"] == pytest.approx(10 ** (-1 / 20), rel=1e-4)


def test_json_dash_is_the_report_on_stdout_and_the_table_on_stderr(folder: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["listen", str(folder / "good.wav"), str(folder / "tiny.wav"), "--json", "-"])
    report = json.loads(res.stdout)  # nothing but the report on stdout: it pipes into jq
    assert res.exit_code == 1 and "output.silent" in {f["id"] for f in report["findings"]}
    assert "output.silent" in res.stderr and not (tmp_path / "-").exists()
    again = CliRunner().invoke(cli, ["listen", str(folder / "good.wav")])  # the next command prints as before
    assert again.exit_code == 0 and "No findings" in again.stdout and "No findings" not in again.stderr
