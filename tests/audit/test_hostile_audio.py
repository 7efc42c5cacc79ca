"""Hostile audio files: damaged headers (byte flips in RIFF/fmt/data), absurd rates, channel
counts and sizes, truncations at many lengths, zero-length files, non-audio bytes named .wav/.flac.

Whatever a file holds, the audit finishes (exit 0 or 1, never 2), every good file in the folder is
still reported, every bad file is a finding naming it, and decoding allocates from what the file
holds, never from what its header claims."""

from __future__ import annotations

import json
import os
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from click.testing import CliRunner
from hostile_cases import (  # type: ignore[import-not-found]
    SR,
    TRIED,
    address_space,
    alarm,
    encode,
    hostile_audio,
    tone,
    with_size,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signalchain.audio.io import MAX_SAMPLES_PER_BYTE, read_audio
from signalchain.audit.measure import measure_example
from signalchain.cli import cli
from signalchain.errors import SignalchainError

GOOD = ("good-a.wav", "good-b.flac", "good-c.wav")


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every hostile class in one folder beside three good files, audited once from the CLI."""
    root = tmp_path_factory.mktemp("hostile-audio")
    classes = hostile_audio(seed=3)
    for files in classes.values():
        for name, data in files.items():
            (root / name).write_bytes(data)
    sf.write(root / GOOD[0], tone(11), SR)
    sf.write(root / GOOD[1], tone(12, channels=2), SR)
    sf.write(root / GOOD[2], tone(13, sr=44100), 44100, subtype="FLOAT")
    out = root.parent / "report.json"
    with alarm(240), address_space(3 << 30):
        run = CliRunner().invoke(cli, ["audit", str(root), "--no-cache", "--json", str(out)])
    report = json.loads(out.read_text()) if out.exists() else {}
    return {"root": root, "classes": classes, "run": run, "report": report}


def _named(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [
        f
        for f in report["findings"]
        if f["severity"] != "info"
        and (
            Path(f["evidence"].get("path", "")).name == name
            or name in {Path(p).name for p in f["evidence"].get("paths", [])}
        )
    ]


def test_the_audit_finishes_and_reports_every_good_file(audited: dict[str, Any]) -> None:
    run, report = audited["run"], audited["report"]
    assert run.exit_code == 1, run.output[-3000:]  # error findings, not a usage or internal error
    files = {Path(f["path"]).name: f for f in report["files"]}
    n_bad = sum(len(v) for v in audited["classes"].values())
    assert len(files) == n_bad + len(GOOD)  # every file is reported, good or bad
    for name in GOOD:
        assert files[name]["problem"] is None and files[name]["seconds"] > 1.0
        assert not _named(report, name), _named(report, name)
    assert not [f for f in report["findings"] if f["id"] == "internal.check_failed"]
    assert not [f for f in report["files"] if "MemoryError" in (f["problem"] or "")]


@pytest.mark.parametrize("cls", ["absurd_rates", "channel_counts", "sizes", "truncations", "zero_length", "not_audio"])
def test_every_damaged_file_of_a_class_is_a_finding_naming_it(audited: dict[str, Any], cls: str) -> None:
    report, files = audited["report"], audited["classes"][cls]
    expected = {"absurd_rates": {"audio.sample_rate", "file.unreadable"},
                "channel_counts": {"audio.channels", "file.unreadable"},
                "sizes": {"file.truncated"},
                "truncations": {"file.truncated", "file.unreadable"},
                "zero_length": {"file.unreadable"},
                "not_audio": {"file.unreadable"}}[cls]
    for name in files:
        ids = {f["id"] for f in _named(report, name)}
        assert ids & expected, f"{cls}/{name}: {ids}"
        TRIED[cls] += 1
    print(f"hostile audio [{cls}]: {len(files)} files, each a finding naming it")
    assert len(files) >= 3


def test_header_flips_are_reported_and_named_when_they_break_the_file(audited: dict[str, Any]) -> None:
    report, files = audited["report"], audited["classes"]["header_flips"]
    listed = {Path(f["path"]).name: f for f in report["files"]}
    broken = 0
    for name in files:
        assert name in listed
        if listed[name]["problem"]:
            broken += 1
            assert _named(report, name), name
    print(f"hostile audio [header_flips]: {len(files)} files, {broken} unreadable (each named), the rest measured")
    assert len(files) == 90 and 0 < broken < len(files)


_BASES = {"pcm16": encode(tone(1)), "float_stereo": encode(tone(2, channels=2), subtype="FLOAT"),
          "pcm8": encode(tone(3), subtype="PCM_U8"), "flac": encode(tone(4), fmt="FLAC")}


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(_BASES)),
       flips=st.lists(st.tuples(st.integers(0, 95), st.integers(0, 255)), min_size=0, max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 50_000)),
       data_size=st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_any_header_damage_is_read_within_what_the_file_holds(base: str, flips: list[tuple[int, int]],
                                                              cut: int | None, data_size: int | None) -> None:
    raw = _BASES[base]
    if data_size is not None and base != "flac":
        raw = with_size(raw, b"data", data_size)
    out = bytearray(raw)
    for pos, value in flips:
        if pos < len(out):
            out[pos] = value
    data = bytes(out[:cut] if cut is not None else out)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.flac" if base == "flac" else "x.wav")
        with open(path, "wb") as fh:
            fh.write(data)
        with address_space(2 << 30):
            tracemalloc.start()
            try:
                m = measure_example(path)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            try:
                af = read_audio(path)
            except SignalchainError:
                af = None  # the one exception read_audio may raise
    TRIED["header_damage_property"] += 1
    assert "MemoryError" not in (m.problem or "")
    assert peak <= (16 << 20) + 64 * len(data), (peak, len(data))  # what the file holds, not what it claims
    if m.problem is None:
        assert m.samples * m.channels <= 8 * len(data)  # no codec turns a byte into more than 8 samples
        assert m.frames_claimed == 0 or m.frames_claimed > m.samples
    if af is not None:
        assert af.frames == af.audio.shape[1] and af.audio.size <= 8 * len(data)


def test_a_header_claiming_two_billion_frames_allocates_what_is_there(tmp_path: Path) -> None:
    wav = tmp_path / "claims.wav"
    wav.write_bytes(with_size(encode(tone(5, seconds=1.0)), b"data", 0xFFFFFFFE))  # 2^31 frames of int16 claimed
    tracemalloc.start()
    af = read_audio(wav)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert af.frames == SR and af.frames_claimed == 0xFFFFFFFE // 2 and af.truncated
    size = wav.stat().st_size  # 32 KB; the claim would be 8 GB of float32
    assert peak <= 4 * MAX_SAMPLES_PER_BYTE * size + 4 * 4 * SR, peak  # planned from the bytes present


@pytest.mark.slow
def test_two_worker_processes_give_the_same_report(audited: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "w2.json"
    with alarm(300):
        run = CliRunner().invoke(
            cli, ["audit", str(audited["root"]), "--no-cache", "--workers", "2", "--json", str(out)]
        )
    assert run.exit_code == 1, run.output[-3000:]
    report = json.loads(out.read_text())
    key = lambda r: sorted((f["id"], f["message"]) for f in r["findings"] if f["id"] != "audit.cache")  # noqa: E731
    assert key(report) == key(audited["report"]) and report["files"] == audited["report"]["files"]
