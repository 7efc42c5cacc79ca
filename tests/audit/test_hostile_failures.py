"""The tester's failures of `signalchain audit`, one test each: every one of them used to end the
whole run (exit 2, no results) or get no finding; now each is a finding naming the file (and the
manifest line), and every good file beside it is still reported."""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner
from hostile_cases import SR, alarm, encode, tone, with_fmt, with_size  # type: ignore[import-not-found]

from signalchain.audio.fingerprint import RATE, frame_features, resampled_length
from signalchain.audit.measure import measure_example
from signalchain.audit.run import run_audit
from signalchain.cli import cli
from signalchain.errors import SignalchainError
from signalchain.findings import Finding
from signalchain.records.audit import MUSICINFO_REQUIRED


def _goods(folder: Path, n: int = 2, sidecars: bool = False) -> list[Path]:
    """`n` distinct good WAVs (with complete AudioCraft sidecars when a manifest will list them)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"good{i}.wav"
        sf.write(p, tone(i), SR)
        if sidecars:
            meta = {k: "" for k in MUSICINFO_REQUIRED} | {"description": f"a decaying tone number {i}"}
            p.with_suffix(".json").write_text(json.dumps(meta))
        out.append(p)
    return out


def _naming(findings: list[Finding], name: str, fid: str | None = None) -> list[Finding]:
    return [f for f in findings if name in f.message and (fid is None or f.id == fid)]


def _assert_goods_reported(res, goods: list[Path]) -> None:  # type: ignore[no-untyped-def]
    files = {Path(f["path"]).name: f for f in res.files}
    for g in goods:
        assert g.name in files and files[g.name]["problem"] is None and files[g.name]["seconds"] > 1.0, files.get(
            g.name
        )
        loud = [f for f in res.findings if f.severity.value != "info" and f.evidence.get("path", "").endswith(g.name)]
        assert not loud, [f.message for f in loud]
    assert not [f for f in res.findings if f.id == "internal.check_failed"], [f.message for f in res.findings]


def test_symlink_loops_in_the_folder_are_findings_and_the_run_goes_on(tmp_path: Path) -> None:
    goods = _goods(tmp_path)
    os.symlink("self.wav", tmp_path / "self.wav")
    os.symlink("b.wav", tmp_path / "a.wav")
    os.symlink("a.wav", tmp_path / "b.wav")
    os.symlink("loop", tmp_path / "loop")
    (tmp_path / "sub").mkdir()
    os.symlink("..", tmp_path / "sub" / "up")  # a folder link back to its own ancestor
    with alarm(60):
        res = run_audit([str(tmp_path)], cache_path=None)
    _assert_goods_reported(res, goods)
    for name in ("self.wav", "a.wav", "b.wav"):
        hits = _naming(res.findings, name, "file.unreadable")
        assert hits and "symlink loop" in hits[0].message and hits[0].severity.value == "error", name
    loops = {Path(f.evidence["path"]).name for f in res.findings if f.id == "file.symlink_loop"}
    assert loops == {"up", "loop"}


def test_a_manifest_line_naming_a_symlink_loop_is_that_line_s_finding(tmp_path: Path) -> None:
    goods = _goods(tmp_path, sidecars=True)
    os.symlink("self.wav", tmp_path / "self.wav")
    rows = [{"path": "good0.wav"}, {"path": "self.wav"}, {"path": "good1.wav"}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = run_audit([str(tmp_path / "data.jsonl")], cache_path=None)
    _assert_goods_reported(res, goods)
    hit = _naming(res.findings, "self.wav", "file.unreadable")
    assert hit and hit[0].evidence["line"] == 2 and "symlink loop" in hit[0].message


@pytest.mark.parametrize("where", ["manifest", "audiofolder", "sidecar"])
def test_a_100000_deep_json_line_is_a_finding_naming_its_line(tmp_path: Path, where: str) -> None:
    goods = _goods(tmp_path, sidecars=where != "audiofolder")
    deep = "[" * 100_000 + "]" * 100_000
    if where == "sidecar":
        (tmp_path / "good1.json").write_text('{"description": ' + deep + "}")
        (tmp_path / "data.jsonl").write_text("".join(json.dumps({"path": g.name}) + "\n" for g in goods))
        res = run_audit([str(tmp_path)], cache_path=None)
        hit = [f for f in res.findings if f.id == "metadata.missing"]
        assert len(hit) == 1 and hit[0].evidence["path"].endswith("good1.wav") and "nested deeper" in hit[0].message
        _assert_goods_reported(res, goods[:1])
        assert len(res.files) == 2 and all(f["problem"] is None for f in res.files)
        return
    key, name = ("path", "data.jsonl") if where == "manifest" else ("file_name", "metadata.jsonl")
    lines = [json.dumps({key: goods[0].name, "text": "a"}), deep, json.dumps({key: goods[1].name, "text": "b"})]
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    res = run_audit([str(tmp_path)], cache_path=None)
    _assert_goods_reported(res, goods)
    bad = [f for f in res.findings if f.id == "manifest.invalid"]
    assert [(Path(f.evidence["manifest"]).name, f.evidence["line"]) for f in bad] == [(name, 2)]
    assert "nested deeper" in bad[0].message
    assert sorted(Path(f["path"]).name for f in res.files) == ["good0.wav", "good1.wav"]


def test_a_5000_digit_duration_is_a_finding_naming_its_line(tmp_path: Path) -> None:
    goods = _goods(tmp_path, 3, sidecars=True)
    lines = [json.dumps({"path": goods[0].name}),
             f'{{"path": "{goods[1].name}", "duration": {"9" * 5000}}}',  # past int's 4300-digit guard
             f'{{"path": "{goods[2].name}", "duration": {"9" * 400}}}']  # parses, too large for a float
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    res = run_audit([str(tmp_path / "data.jsonl")], cache_path=None)
    bad = sorted((f.evidence["line"], f.message) for f in res.findings if f.id == "manifest.invalid")
    assert [line for line, _ in bad] == [2, 3]
    assert "4300 digits" in bad[0][1] and "not a finite positive number" in bad[1][1]
    _assert_goods_reported(res, [goods[0]])
    listed = {Path(f["path"]).name: f["problem"] for f in res.files}
    assert listed == {"good0.wav": None, "good2.wav": None}  # line 3's file is still audited (its duration dropped)


def test_a_file_name_that_is_not_utf8_is_audited_and_named(tmp_path: Path) -> None:
    goods = _goods(tmp_path)
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9-\xff.wav")
    with open(odd, "wb") as fh:
        fh.write(encode(tone(7)))
    cache = tmp_path / "c.sqlite"
    res = run_audit([str(tmp_path)], cache_path=cache)
    _assert_goods_reported(res, goods)
    row = [f for f in res.files if "caf" in f["path"]]
    assert row and row[0]["problem"] is None and row[0]["path"].endswith("caf\\xe9-\\xff.wav")
    named = [f for f in res.findings if f.id == "file.name_encoding"]
    assert len(named) == 1 and named[0].severity.value == "warning" and "caf\\xe9-\\xff.wav" in named[0].message
    json.dumps([f.to_dict() for f in res.findings], ensure_ascii=False).encode("utf-8")  # every writer takes it
    again = run_audit([str(tmp_path)], cache_path=cache)
    assert again.cache["hits"] == 3 and again.cache["measured"] == 0  # its cache row is keyed by its bytes
    out = tmp_path / "r.json"
    cli_run = CliRunner().invoke(cli, ["audit", str(tmp_path), "--no-cache", "--json", str(out)])
    assert cli_run.exit_code == 0, cli_run.output
    assert "caf\\\\xe9" in out.read_text()


def test_a_manifest_path_with_a_surrogate_escape_finds_the_file(tmp_path: Path) -> None:
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9.wav")
    with open(odd, "wb") as fh:
        fh.write(encode(tone(2)))
    (tmp_path / "data.jsonl").write_text(json.dumps({"path": os.fsdecode(b"caf\xe9.wav")}) + "\n")  # "caf\udce9.wav"
    res = run_audit([str(tmp_path / "data.jsonl")], cache_path=None)
    assert [f["problem"] for f in res.files] == [None]
    assert {f.id for f in res.findings if f.severity.value != "info"} >= {"file.name_encoding"}


def _corrupt(cache: Path, how: str, path: str) -> None:
    sets = {"scalars_not_json": "scalars = '{'", "scalars_wrong_type": "scalars = '{\"problem\": 3}'",
            "scalars_list": "scalars = '[]'", "windows_short": "windows = x'0000'",
            "window_count_negative": "window_count = -4", "windows_nan": "windows = zeroblob(length(windows))",
            "frames_short": "frames = x'00'", "seconds_text": "seconds = 'soon'"}
    with sqlite3.connect(cache) as db:
        db.execute(f"UPDATE measures SET {sets[how]} WHERE path = ?", (path,))
        if how == "windows_nan":  # float16 NaN is 0x7e00: a blob of NaNs of the right length
            (n,) = db.execute("SELECT length(windows) FROM measures WHERE path = ?", (path,)).fetchone()
            db.execute("UPDATE measures SET windows = ? WHERE path = ?", (b"\x00\x7e" * (n // 2), path))


def test_corrupted_cache_rows_are_ignored_and_recomputed(tmp_path: Path) -> None:
    kinds = ["scalars_not_json", "scalars_wrong_type", "scalars_list", "windows_short", "window_count_negative",
             "windows_nan", "frames_short", "seconds_text"]
    data = tmp_path / "data"
    goods = _goods(data, len(kinds))
    cache = tmp_path / "c.sqlite"
    first = run_audit([str(data)], cache_path=cache)
    for how, g in zip(kinds, goods):
        _corrupt(cache, how, str(g.resolve()))
    with alarm(60):
        again = run_audit([str(data)], cache_path=cache)
    note = [f for f in again.findings if f.id == "audit.cache"]
    # frames are read only when an alignment needs them: a damaged frames blob is not read here
    assert note and note[0].evidence["damaged_rows"] == len(kinds) - 1
    assert again.cache["measured"] == len(kinds) - 1
    key = lambda r: [(f.id, f.message) for f in r.findings if f.id != "audit.cache"]  # noqa: E731
    assert key(again) == key(first) and again.files == first.files
    third = run_audit([str(data)], cache_path=cache)  # the rows were rewritten
    assert third.cache["hits"] == len(kinds) and not [f for f in third.findings if f.id == "audit.cache"]


def _one_hz_wav(path: Path) -> Path:
    path.write_bytes(with_fmt(encode(tone(1, seconds=2.0)), rate=1))  # 64 KB of audio, "1 Hz" in the header
    return path


def test_the_fingerprint_plans_its_allocation_from_the_frames_present() -> None:
    assert resampled_length(32000, 1000) == 32000 * RATE // 1000  # the most any accepted rate asks: 8 per sample
    assert resampled_length(48000, 48000) == RATE
    for rate in (0, 1, 999, 768_001, 2**31):
        with pytest.raises(SignalchainError, match="outside 1000-768000 Hz"):
            resampled_length(32000, rate)
    tracemalloc.start()
    with pytest.raises(SignalchainError, match="1 Hz is outside"):
        frame_features(np.zeros(32000, np.float32), 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20  # refused before anything scaled by the rate was allocated


def test_a_1_hz_header_is_a_finding_with_bounded_memory(tmp_path: Path) -> None:
    wav = _one_hz_wav(tmp_path / "one-hz.wav")
    tracemalloc.start()
    m = measure_example(str(wav))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert m.problem is not None and m.problem.startswith("sample rate: 1 Hz")
    assert peak < 8 * wav.stat().st_size + (4 << 20), peak  # before the fix: ~20 GB for this file
    goods = _goods(tmp_path)
    res = run_audit([str(tmp_path)], cache_path=None)
    _assert_goods_reported(res, goods)
    hit = _naming(res.findings, "one-hz.wav", "audio.sample_rate")
    assert hit and hit[0].severity.value == "error" and hit[0].evidence["sample_rate"] == 1


@pytest.mark.slow
def test_the_1_hz_audit_runs_under_a_3_gb_address_space_limit(tmp_path: Path) -> None:
    """The whole audit in a process that cannot map more than 3 GB (the unfixed fingerprint asked
    for 20 GB): it finishes, names the file with audio.sample_rate, and reports the good one."""
    _one_hz_wav(tmp_path / "one-hz.wav")
    _goods(tmp_path, 1)
    script = ("import json, resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
              "from signalchain.audit.run import run_audit\n"
              "r = run_audit([sys.argv[1]], cache_path=None)\n"
              "print(json.dumps({'ids': [[f.id, f.message] for f in r.findings], 'files': r.files}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(fid == "audio.sample_rate" and "one-hz.wav" in msg for fid, msg in out["ids"]), out["ids"]
    assert not any("MemoryError" in msg for _, msg in out["ids"])
    assert [f["problem"] for f in out["files"] if f["path"].endswith("good0.wav")] == [None]


def test_a_lying_header_and_three_channels_are_findings(tmp_path: Path) -> None:
    goods = _goods(tmp_path)
    mono = encode(tone(5, seconds=2.0))
    at = mono.index(b"data") + 4
    data_bytes = struct.unpack("<I", mono[at : at + 4])[0]
    (tmp_path / "lies.wav").write_bytes(with_size(mono, b"data", data_bytes + 100_000_000))
    sf.write(tmp_path / "three.wav", tone(6, channels=3), SR)
    res = run_audit([str(tmp_path)], cache_path=None)
    _assert_goods_reported(res, goods)
    lie = _naming(res.findings, "lies.wav", "file.truncated")
    assert lie and lie[0].severity.value == "error"
    assert lie[0].evidence["frames_present"] == 2 * SR
    assert lie[0].evidence["frames_claimed"] == (data_bytes + 100_000_000) // 2
    three = _naming(res.findings, "three.wav", "audio.channels")
    assert three and three[0].evidence["channels"] == 3 and "3 channels" in three[0].message
    assert [f["problem"] for f in res.files if f["path"].endswith(("lies.wav", "three.wav"))] == [None, None]


def test_non_regular_files_are_skipped_with_a_finding_and_never_opened(tmp_path: Path) -> None:
    goods = _goods(tmp_path)
    os.mkfifo(tmp_path / "pipe.wav")  # opening it for reading would block until a writer comes
    os.symlink("/dev/zero", tmp_path / "zeros.flac")  # a device: reading it never ends
    (tmp_path / "folder.wav").mkdir()
    sf.write(tmp_path / "folder.wav" / "inside.wav", tone(9), SR)  # what a folder named like audio holds is audited
    with alarm(60):
        res = run_audit([str(tmp_path)], cache_path=None, workers=1)
    _assert_goods_reported(res, goods + [tmp_path / "folder.wav" / "inside.wav"])
    kinds = {Path(f.evidence["path"]).name: f.evidence["kind"] for f in res.findings if f.id == "file.not_regular"}
    assert kinds == {"pipe.wav": "a FIFO (named pipe)", "zeros.flac": "a character device", "folder.wav": "a directory"}
