"""`signalchain listen` on hostile files: a FIFO is refused without blocking, a float file with NaNs
is said to hold non-finite samples (not a wrong subtype), a truncated file or a lying header is a
finding with frames claimed and present while what it holds is still measured and played, and a
folder of damaged headers finishes with findings, never an internal error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from hostile_cases import (  # noqa: E402  # type: ignore[import-not-found]
    SR,
    TRIED,
    alarm,
    encode,
    hostile_audio,
    make_fifo,
    tone,
    with_size,
)

from signalchain.cli import cli  # noqa: E402


def _listen(*args: str) -> tuple[int, str, dict[str, Any]]:
    out = Path(args[-1]).parent / "listen.json" if args and Path(args[-1]).exists() else None
    extra = ["--json", str(out)] if out else []
    with alarm(120):
        res = CliRunner().invoke(cli, ["listen", *args, *extra])
    report = json.loads(out.read_text()) if out and out.exists() else {}
    return res.exit_code, res.output, report


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "pipe.wav")
    sf.write(tmp_path / "good.wav", tone(1), SR)
    code, text, report = _listen(str(tmp_path))  # inside a folder: a finding, and the rest goes on (120 s alarm)
    assert code == 1, text
    assert [(f["id"], Path(f["evidence"]["path"]).name) for f in report["findings"]] == [
        ("file.not_regular", "pipe.wav")
    ]
    assert [Path(f["path"]).name for f in report["files"]] == ["good.wav"]
    for args in ([str(fifo), str(tmp_path / "good.wav")], [str(fifo)]):  # named on the command line: a usage error
        with alarm(60):
            res = CliRunner().invoke(cli, ["listen", *args])
        assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.output
        assert f"{fifo}: is a FIFO" in res.stderr and "internal error" not in res.stderr


@pytest.mark.slow
def test_the_command_given_a_fifo_exits_in_its_own_process(tmp_path: Path) -> None:
    """The real command in its own process, with a timeout: before, it waited on the FIFO forever."""
    fifo = make_fifo(tmp_path / "pipe.wav")
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-c", "from signalchain.cli import main; main()", "listen", str(fifo),
                           "--json", str(out)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "is a FIFO" in done.stderr and not out.exists()


def test_nan_samples_in_a_float_file_are_non_finite_not_a_subtype_misread(tmp_path: Path) -> None:
    x = tone(2)[:, 0].copy()
    x[1000:1250] = np.nan
    x[5000] = np.inf
    sf.write(tmp_path / "nan.wav", x, SR, subtype="FLOAT")
    code, _, report = _listen(str(tmp_path / "nan.wav"))
    assert code == 1
    ids = [f["id"] for f in report["findings"]]
    assert ids == ["audio.nonfinite"], ids
    ev = report["findings"][0]["evidence"]
    assert ev["count"] == 251 and ev["total"] == len(x) and ev["fraction"] == pytest.approx(251 / len(x))
    assert "251 of 24,000 samples" in report["findings"][0]["message"]


def test_a_truncated_file_and_a_lying_header_are_findings_and_still_played(tmp_path: Path) -> None:
    flac = encode(tone(3, seconds=2.0), fmt="FLAC")
    (tmp_path / "cut.flac").write_bytes(flac[: len(flac) // 2])
    mono = encode(tone(4, seconds=2.0))
    at = mono.index(b"data") + 4
    data_bytes = int.from_bytes(mono[at : at + 4], "little")
    (tmp_path / "lies.wav").write_bytes(with_size(mono, b"data", data_bytes + 100_000_000))
    (tmp_path / "cut.wav").write_bytes(mono[: len(mono) // 3])
    sf.write(tmp_path / "good.wav", tone(5), SR)
    page = tmp_path / "p.html"
    with alarm(120):
        res = CliRunner().invoke(
            cli, ["listen", str(tmp_path), "--json", str(tmp_path / "r.json"), "--html", str(page)]
        )
    assert res.exit_code == 1, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    truncated = {
        Path(f["evidence"]["path"]).name: f["evidence"] for f in report["findings"] if f["id"] == "file.truncated"
    }
    assert set(truncated) == {"cut.flac", "lies.wav", "cut.wav"}
    assert truncated["lies.wav"] == {**truncated["lies.wav"], "frames_claimed": (data_bytes + 100_000_000) // 2,
                                     "frames_present": 2 * SR}
    assert truncated["cut.wav"]["frames_claimed"] == 2 * SR and 0 < truncated["cut.wav"]["frames_present"] < SR
    assert 0 < truncated["cut.flac"]["frames_present"] < truncated["cut.flac"]["frames_claimed"] == 2 * SR
    frames = {Path(f["path"]).name: f["frames"] for f in report["files"]}
    assert frames["cut.flac"] == truncated["cut.flac"]["frames_present"]  # what is there is measured
    assert page.read_text().count("<audio") == 4  # and every one of them can be played
    assert not [f for f in report["findings"] if Path(f["evidence"]["path"]).name == "good.wav"]


def test_a_folder_of_hostile_headers_finishes_with_findings(tmp_path: Path) -> None:
    classes = hostile_audio(seed=5)
    # (listen's summary correlates every pair of channels: 1024 of them take seconds, so that one
    # file stays in the audit's suite and out of this one)
    del classes["channel_counts"]["ch1024.wav"]
    for files in classes.values():
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
    sf.write(tmp_path / "good.wav", tone(6), SR)
    make_fifo(tmp_path / "fifo.wav")
    os.symlink("self.wav", tmp_path / "self.wav")
    os.symlink("gone.wav", tmp_path / "dangling.wav")
    out = tmp_path / "r.json"
    with alarm(240):
        res = CliRunner().invoke(cli, ["listen", str(tmp_path), "--json", str(out)])
    assert res.exit_code == 1 and "signalchain: internal error" not in res.output, res.output[-3000:]
    report = json.loads(out.read_text())
    assert not [f for f in report["findings"] if f["id"] == "internal.check_failed"]
    listed = {Path(f["path"]).name for f in report["files"]}
    named = {Path(f["evidence"].get("path", "")).name for f in report["findings"]}
    for cls, files in classes.items():
        for name in files:
            assert name in listed or name in named, (cls, name)
            if cls in ("zero_length", "not_audio", "truncations", "absurd_rates"):
                assert name in named, (cls, name)
            TRIED[f"listen:{cls}"] += 1
    assert {"fifo.wav", "self.wav", "dangling.wav"} <= named
    assert "good.wav" in listed and "good.wav" not in named
    print(f"hostile listen: {sum(len(v) for v in classes.values()) + 3} files, every one reported or named")
