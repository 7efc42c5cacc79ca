"""`signalchain.audit` and `signalchain.listen` on folders of WAV files written here: clean ones, a
silent clip, a corrupt file; the command line's JSON schema and pages; `signalchain.audit` is still
the audit package as well as the function."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import signalchain as sc

SR = 16000


def _tone(freq: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * freq * t) * np.linspace(0.5, 1.0, t.size)).astype(np.float32)


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    folder = tmp_path / "clean"
    folder.mkdir()
    for i, freq in enumerate((220.0, 330.0, 495.0)):
        sf.write(folder / f"tone{i}.wav", _tone(freq), SR, subtype="PCM_16")
    return folder


@pytest.fixture
def flawed(clean: Path) -> Path:
    sf.write(clean / "quiet.wav", np.zeros(SR, np.float32), SR, subtype="PCM_16")
    return clean


def test_audit_of_a_clean_folder_is_ok(clean: Path) -> None:
    report = sc.audit(clean, cache=False)
    assert isinstance(report, sc.AuditReport)
    assert report.ok and not report.findings and len(report.files) == 3
    assert str(report).splitlines()[0] == "audit · 3 examples — ok: 0 errors, 0 warnings, 0 info"


def test_audit_finds_a_silent_clip(flawed: Path) -> None:
    report = sc.audit(str(flawed), cache=False)
    silent = [f for f in report.findings if f.id == "audio.silent"]
    assert len(silent) == 1 and "quiet.wav" in silent[0].message
    assert report.ok == (not report.errors)
    first = (report.errors or report.warnings)[0]  # str() names the worst finding first
    assert str(report).splitlines()[1] == f"first {first.severity.value}: {first.id} at {first.stage}: {first.message}"


def test_audit_of_a_corrupt_file_is_not_ok(flawed: Path) -> None:
    (flawed / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunk")
    report = sc.audit([flawed], cache=False)
    assert not report.ok
    first = report.errors[0]
    assert "broken.wav" in first.message
    assert str(report).splitlines()[1] == f"first error: {first.id} at {first.stage}: {first.message}"


def test_audit_json_and_page_are_the_command_lines(flawed: Path, tmp_path: Path, cli_json) -> None:
    report = sc.audit(flawed, cache=False)
    mine, theirs = json.loads(report.to_json()), cli_json("audit", str(flawed), "--no-cache")
    assert list(mine) == list(theirs)
    assert [f["id"] for f in mine["findings"]] == [f["id"] for f in theirs["findings"]]
    page = report.to_html(tmp_path / "audit.html").read_text(encoding="utf-8")
    assert "<title>signalchain audit</title>" in page


def test_audit_of_an_empty_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(sc.UsageError, match="nothing to audit in .*: no audio files"):
        sc.audit(tmp_path, cache=False)
    with pytest.raises(sc.UsageError, match="nothing to audit: give a path"):
        sc.audit()


def test_named_splits(clean: Path, tmp_path: Path) -> None:
    copy = tmp_path / "valid"
    copy.mkdir()
    (copy / "tone0.wav").write_bytes((clean / "tone0.wav").read_bytes())  # an evaluation clip trained on
    report = sc.audit(splits={"train": clean, "valid": copy}, cache=False)
    assert set(report.splits) == {"train", "valid"}
    assert report.matches and any(f.id.startswith("split.") for f in report.findings)


def test_audit_is_the_package_and_the_function() -> None:
    from signalchain.audit import run_audit
    from signalchain.audit.run import AuditResult

    assert callable(sc.audit) and sc.audit.run_audit is run_audit and sc.audit.AuditResult is AuditResult


def test_listen_to_a_clean_file_is_ok(clean: Path) -> None:
    report = sc.listen(clean / "tone0.wav")
    assert isinstance(report, sc.ListenReport)
    assert report.ok and len(report.files) == 1 and report.files[0].sample_rate == SR
    assert str(report).startswith("listen · 1 file — ok:")


def test_listen_to_a_silent_file_names_the_error(flawed: Path, tmp_path: Path, cli_json) -> None:
    report = sc.listen([flawed / "quiet.wav", flawed / "tone1.wav"], rate=SR)
    assert not report.ok
    first = report.errors[0]
    assert first.id == "output.silent" and first.stage == "audio.written"
    lines = str(report).splitlines()
    assert lines[0].startswith("listen · 2 files — not ok: 1 error")
    assert lines[1].startswith("first error: output.silent at audio.written: ") and "-120.0 dBFS" in lines[1]
    mine = json.loads(report.to_json())
    theirs = cli_json("listen", str(flawed / "quiet.wav"), str(flawed / "tone1.wav"), "--rate", str(SR))
    assert list(mine) == list(theirs) and mine["expected_rate"] == theirs["expected_rate"] == SR
    assert [f["id"] for f in mine["findings"]] == [f["id"] for f in theirs["findings"]]
    assert "<title>signalchain listen</title>" in report.to_html(tmp_path / "l.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("kwargs, match", [
    (dict(rate=0), "rate must be a positive number of Hz, got 0"),
    (dict(subtype="PCM_17"), "subtype 'PCM_17' is not a soundfile subtype"),
])
def test_listen_bad_arguments_are_usage_errors(clean: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(sc.UsageError, match=match):
        sc.listen(clean, **kwargs)
