"""Hostile paths: symlink loops, dangling symlinks, FIFOs, sockets, devices, folders named like
audio, names that are not UTF-8, as folder entries and as manifest rows, and in the places beside
the audio (sidecar JSON, .txt caption, feature-cache references). Nothing is opened that could
block, every good file is reported, every bad entry is a finding naming it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from click.testing import CliRunner
from hostile_cases import SR, TRIED, alarm, make_fifo, make_socket, tone  # type: ignore[import-not-found]

from signalchain.audio._files import check_path, display_path, list_files
from signalchain.cli import cli

# name -> (how to make it in a folder, the finding id it must get)
Maker = Callable[[Path], object]
ENTRIES: dict[str, tuple[Maker, str]] = {
    "self-loop.wav": (lambda p: os.symlink(p.name, p), "file.unreadable"),
    "cycle-a.wav": (lambda p: os.symlink("cycle-b.wav", p), "file.unreadable"),
    "cycle-b.wav": (lambda p: os.symlink("cycle-a.wav", p), "file.unreadable"),
    "dangling.wav": (lambda p: os.symlink("nowhere/gone.wav", p), "file.missing"),
    "dangling-abs.flac": (lambda p: os.symlink("/nonexistent/dir/x.flac", p), "file.missing"),
    "fifo.wav": (make_fifo, "file.not_regular"),
    "fifo.flac": (make_fifo, "file.not_regular"),
    "socket.wav": (make_socket, "file.not_regular"),
    "null-device.wav": (lambda p: os.symlink("/dev/null", p), "file.not_regular"),
    "zero-device.ogg": (lambda p: os.symlink("/dev/zero", p), "file.not_regular"),
    "folder.wav": (lambda p: p.mkdir(), "file.not_regular"),
    "link-to-fifo.wav": (lambda p: os.symlink("fifo.wav", p), "file.not_regular"),
}
FOLDER_LOOPS = {"sub/up": "..", "here": ".", "deep/down/top": "../.."}  # folder links into their own ancestry


def _good(folder: Path, n: int) -> list[str]:
    names = []
    for i in range(n):
        sf.write(folder / f"good{i}.wav", tone(30 + i), SR)
        names.append(f"good{i}.wav")
    return names


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("paths")
    goods = _good(root, 3)
    for name, (make, _) in ENTRIES.items():
        make(root / name)
    for link, target in FOLDER_LOOPS.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / link)
    (root / "real").mkdir()
    sf.write(root / "real" / "inner.wav", tone(40), SR)
    os.symlink("real", root / "alias")  # a folder reached twice: its file is listed once
    for raw in (b"caf\xe9.wav", b"\xff\xfe.flac", b"tab\there.wav"):  # names that are not UTF-8 / not printable
        with open(os.path.join(os.fsencode(root), raw), "wb") as fh:
            sf.write(fh, tone(len(raw)), SR, format="FLAC" if raw.endswith(b".flac") else "WAV")
    out = root.parent / "paths.json"
    with alarm(120):
        run = CliRunner().invoke(cli, ["audit", str(root), "--no-cache", "--json", str(out)])
    return {"root": root, "goods": goods + ["inner.wav"], "run": run,
            "report": json.loads(out.read_text()) if out.exists() else None}


def test_a_folder_of_hostile_entries_is_audited_to_the_end(hostile_folder: dict[str, Any]) -> None:
    run, report = hostile_folder["run"], hostile_folder["report"]
    assert run.exit_code == 1, run.output[-3000:]
    files = {Path(f["path"]).name: f for f in report["files"]}
    for name in hostile_folder["goods"]:
        assert files[name]["problem"] is None, files[name]
        assert not [
            f for f in report["findings"] if f["severity"] != "info" and f["evidence"].get("path", "").endswith(name)
        ]
    assert sum(1 for f in report["files"] if f["path"].endswith("inner.wav")) == 1
    assert not [f for f in report["findings"] if f["id"] == "internal.check_failed"]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_hostile_entry_is_a_finding_naming_it(hostile_folder: dict[str, Any], name: str) -> None:
    want = ENTRIES[name][1]
    hits = [f for f in hostile_folder["report"]["findings"] if Path(f["evidence"].get("path", "")).name == name]
    assert [f["id"] for f in hits] == [want], hits
    TRIED["paths:entries"] += 1


def test_folder_links_into_their_own_ancestry_are_named_not_followed(hostile_folder: dict[str, Any]) -> None:
    loops = {
        Path(f["evidence"]["path"]).name for f in hostile_folder["report"]["findings"] if f["id"] == "file.symlink_loop"
    }
    assert loops == {Path(k).name for k in FOLDER_LOOPS}
    TRIED["paths:folder_loops"] += len(FOLDER_LOOPS)


def test_names_that_are_not_utf8_are_audited_and_shown_escaped(hostile_folder: dict[str, Any]) -> None:
    report = hostile_folder["report"]
    files = {Path(f["path"]).name: f["problem"] for f in report["files"]}
    assert files["caf\\xe9.wav"] is None and files["\\xff\\xfe.flac"] is None and files["tab\\x09here.wav"] is None
    named = sorted(Path(f["evidence"]["path"]).name for f in report["findings"] if f["id"] == "file.name_encoding")
    assert named == ["\\xff\\xfe.flac", "caf\\xe9.wav"]  # a tab is legal UTF-8: shown escaped, not flagged
    TRIED["paths:names"] += 3


def test_a_manifest_naming_each_hostile_entry_names_its_line(hostile_folder: dict[str, Any], tmp_path: Path) -> None:
    root = hostile_folder["root"]
    names = ["good0.wav", *sorted(ENTRIES), "good1.wav"]
    manifest = tmp_path / "data.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(root / n), "description": "x"}) + "\n" for n in names))
    out = tmp_path / "m.json"
    with alarm(120):
        run = CliRunner().invoke(cli, ["audit", str(manifest), "--no-cache", "--json", str(out)])
    assert run.exit_code == 1, run.output[-3000:]
    report = json.loads(out.read_text())
    for line, name in enumerate(names, start=1):
        hits = [f for f in report["findings"] if f["evidence"].get("line") == line and f["id"] != "metadata.missing"]
        if name.startswith("good"):
            assert not hits, hits
        else:
            assert [f["id"] for f in hits] == [ENTRIES[name][1]], (name, hits)
    TRIED["paths:manifest_rows"] += len(ENTRIES)


def test_fifos_beside_the_audio_are_never_read(tmp_path: Path) -> None:
    """A FIFO where the sidecar, the .txt caption or a cached-features file should be."""
    sf.write(tmp_path / "a.wav", tone(50), SR)
    sf.write(tmp_path / "b.wav", tone(51), SR)
    make_fifo(tmp_path / "a.json")  # the sidecar
    make_fifo(tmp_path / "feat.npy")
    (tmp_path / "b.json").write_text(json.dumps({"description": "fine", "feature_path": str(tmp_path / "feat.npy")}))
    manifest = tmp_path / "data.jsonl"
    manifest.write_text(
        json.dumps({"path": "a.wav"}) + "\n" + json.dumps({"path": "b.wav", "features": "feat.npy"}) + "\n"
    )
    out = tmp_path / "r.json"
    with alarm(60):
        run = CliRunner().invoke(cli, ["audit", str(manifest), "--no-cache", "--json", str(out)])
    assert run.exit_code == 1, run.output
    report = json.loads(out.read_text())
    side = [f for f in report["findings"] if f["id"] == "metadata.missing" and f["evidence"]["path"].endswith("a.wav")]
    assert side and "FIFO" in side[0]["message"]
    assert [f["problem"] for f in report["files"]] == [None, None]
    plain = tmp_path / "plain"
    plain.mkdir()
    sf.write(plain / "c.wav", tone(52), SR)
    make_fifo(plain / "c.txt")  # the caption
    with alarm(60):
        run = CliRunner().invoke(cli, ["audit", str(plain), "--no-cache", "--json", str(out)])
    report = json.loads(out.read_text())
    cap = [f for f in report["findings"] if f["id"] == "metadata.missing"]
    assert cap and "FIFO" in cap[0]["message"] and report["files"][0]["problem"] is None
    TRIED["paths:beside_audio"] += 3


def test_check_path_and_list_files_never_open_what_they_look_at(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "p.wav")
    with alarm(10):
        assert check_path(fifo).kind == "not_regular" and check_path(tmp_path / "nope").kind == "missing"
        os.symlink("loop", tmp_path / "loop")
        assert check_path(tmp_path / "loop").kind == "loop"
        assert check_path("a\x00b").kind == "error"
        listing = list_files(tmp_path, [".wav"])
    assert listing.files == [str(fifo)] and [Path(p).name for p, _ in listing.loops] == ["loop"]
    assert display_path(os.fsdecode(b"x\xff\n.wav")) == "x\\xff\\x0a.wav"


def test_a_folder_whose_name_is_not_utf8_is_audited_with_its_reports(tmp_path: Path) -> None:
    folder = os.path.join(os.fsencode(tmp_path), b"d\xff")
    os.mkdir(folder)
    for i in range(2):
        with open(os.path.join(folder, b"g%d.wav" % i), "wb") as fh:  # soundfile takes no such name: a handle
            sf.write(fh, tone(60 + i), SR, format="WAV")
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    with alarm(120):
        run = CliRunner().invoke(
            cli, ["audit", os.fsdecode(folder), "--no-cache", "--json", str(out), "--html", str(page)]
        )
    assert run.exit_code == 0, run.output[-2000:]
    report = json.loads(out.read_text())
    assert [f["problem"] for f in report["files"]] == [None, None] and report["sources"][0]["path"].endswith("d\\xff")
    assert {f["id"] for f in report["findings"] if f["severity"] != "info"} == {"file.name_encoding"}
    assert "d\\xff" in page.read_text(encoding="utf-8")
    TRIED["paths:names"] += 1
