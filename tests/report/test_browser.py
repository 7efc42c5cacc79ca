"""Every kind of report, as the CLI writes it, loaded in headless Chromium: each <audio> decodes to a
finite positive duration, each <img> loads, the console holds no error, and the page needs nothing
outside itself (`_chromium.Page.problems`).

The doctor runs the output family (players for every stage) and the conditioning family (plots)
on the economy budget; the capture is the reference's golden batch (whose page `inspect` shows
too). `faults` is rendered from a `Score` of the real catalogue rather than by the command: one
scored fault with its clean control takes over a minute on two cores (see the closing note).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from _chromium import Page, load
from click.testing import CliRunner

from signalchain.cli import cli

SR = 16000


def _run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in (0, 1), result.output  # 2 would be a usage or internal error
    return result


def _passes(page: Page, title: str, audio: int = 0, images: int = 0) -> None:
    assert page.title.startswith(title), page.title
    assert not page.problems(), "\n".join(page.problems())
    assert len(page.audio) >= audio and len(page.images) >= images, (len(page.audio), len(page.images))


def _tone(freq: float, seconds: float, sr: int = SR, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * freq * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
    return np.stack([x] * channels, axis=1).astype(np.float32)


@pytest.mark.slow
def test_doctor_page_plays_and_draws(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "doctor.html"
    _run("doctor", "--family", "output", "--family", "conditioning", "--budget", "economy", "--html", str(out))
    page = load(browser, out)
    _passes(page, "signalchain doctor", audio=2, images=1)
    assert "Listen to every stage" in page.text


@pytest.mark.slow
def test_capture_report_in_the_golden_folder(browser: Any, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    _run("capture", "--out", str(golden), "--html", str(golden / "report.html"))
    page = load(browser, golden / "report.html")
    # one player per example and audio stage, pictures of audio, codes and masks
    _passes(page, "signalchain", audio=8, images=4)
    _run("compare", str(golden), str(golden), "--html", str(tmp_path / "compare.html"))
    _passes(load(browser, tmp_path / "compare.html"), "signalchain")


@pytest.fixture
def listen_folder(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """Files `listen` meets in the wild, each named for what it is; value: the samples it holds."""
    folder = tmp_path / "listen"
    folder.mkdir()
    files = {
        "tone.wav": (_tone(440, 1.0), SR, "WAV"),
        "stereo.flac": (_tone(330, 0.7, channels=2), SR, "FLAC"),
        "clip.ogg": (_tone(550, 0.6), SR, "OGG"),
        "clip.mp3": (_tone(660, 0.6, 22050), 22050, "MP3"),
        "ten samples.wav": (_tone(440, 10 / SR), SR, "WAV"),
        "header at 1000 Hz.wav": (_tone(40, 2.0, 1000), 1000, "WAV"),
        "six channels at 96 kHz.wav": (_tone(440, 0.3, 96000, channels=6), 96000, "WAV"),
        "empty.wav": (np.zeros((0, 1), np.float32), SR, "WAV"),
    }
    held = {}
    for name, (x, sr, fmt) in files.items():
        sf.write(folder / name, x, sr, format=fmt)
        held[name] = len(x)
    return folder, held


@pytest.mark.slow
def test_listen_page_plays_every_file_with_samples(browser: Any, listen_folder: tuple[Path, dict[str, int]],
                                                   tmp_path: Path) -> None:
    folder, held = listen_folder
    out = tmp_path / "listen.html"
    _run("listen", str(folder), "--html", str(out))
    page = load(browser, out)
    _passes(page, "signalchain listen", images=len(held))
    players = {a["label"] for a in page.audio}
    assert players == {str(folder / n) for n, samples in held.items() if samples}, players
    assert "nothing to play" in page.text  # the empty file says so instead of a dead player
    assert "resampled from 1000 Hz" in page.text  # under what browsers play: resampled, not dead
    for name, samples in held.items():
        dur = next((float(a["duration"]) for a in page.audio if a["label"].endswith(name)), None)
        if samples and "mp3" not in name:
            rate = {"header at 1000 Hz.wav": 1000, "six channels at 96 kHz.wav": 96000}.get(name, SR)
            assert dur is not None and abs(dur - samples / rate) <= 0.05 * samples / rate + 0.03, (name, dur)


@pytest.mark.slow
def test_audit_page_plays_the_flagged_pair(browser: Any, tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    for split, names in {"train": ("a", "b", "c"), "valid": ("d",)}.items():
        (root / split).mkdir(parents=True)
        for i, name in enumerate(names):
            sf.write(root / split / f"{name}.wav", _tone(220 * (i + 1) + 17 * len(split), 2.0), SR)
    (root / "valid" / "copy of b.wav").write_bytes((root / "train" / "b.wav").read_bytes())
    out = tmp_path / "audit.html"
    result = _run("audit", str(root), "--no-cache", "--html", str(out))
    assert result.exit_code == 1  # the copy across splits is an error
    page = load(browser, out)
    _passes(page, "signalchain audit", audio=2)
    assert "split.duplicate" in page.text


def test_faults_page_of_the_catalogue(browser: Any, tmp_path: Path) -> None:
    from signalchain.experiments.scoring import FaultRow, Score
    from signalchain.reference import ReferencePipeline
    from signalchain.report import render_faults

    catalogue = ReferencePipeline().fault_catalogue()
    rows = [FaultRow(name=f["name"], family=f["family"], cause=f["cause"], expected_ids=list(f["expected_ids"]),
                     expected_stage=f["expected_stage"], symptom=f.get("symptom"), detected=i % 3 > 0,
                     localised=i % 3 == 2, found_ids=list(f["expected_ids"]) if i % 3 else [])
            for i, f in enumerate(catalogue)]
    control = [{"seed": 0, "findings": [{"id": "loss.spike", "severity": "warning", "stage": "loss",
                                         "message": "loss rose 3x in one step"}]}, {"seed": 1, "findings": []}]
    out = render_faults(Score(rows, [0, 1], control, seconds=1.0).to_dict()).write(tmp_path / "faults.html")
    page = load(browser, out)
    _passes(page, "signalchain faults")
    assert all(f["name"] in page.text for f in catalogue) and "loss rose 3x" in page.text
