"""The MIDI audit on files (audit/midi_read.py, midi_run.py, the `audit` command): broken, truncated,
non-MIDI and empty files are one finding each naming the file while the rest is audited; copies
across splits are found in folders and manifests; a clean dataset passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from signalchain.audit.midi_read import MidiProblem, is_midi_dataset, parse_midi, read_midi
from signalchain.audit.midi_run import run_midi_audit
from signalchain.cli import cli
from signalchain.symbolic.notes import score_to_midi_bytes, to_score
from signalchain.symbolic.random_pieces import random_piece, revoiced, stretched, transposed


def _write(path: Path, rows: np.ndarray, tempo: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(score_to_midi_bytes(to_score(rows, tempo)))
    return path


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train/ of 20 pieces; test/ with a copy, a transposed copy (-3), a tempo change, a time-stretch,
    a re-voicing, 4 unrelated pieces, and a text file, a truncated file and an empty MIDI file."""
    root = tmp_path_factory.mktemp("midi")
    rng = np.random.default_rng(7)
    pieces = [random_piece(rng) for _ in range(20)]
    for i, (rows, tempo) in enumerate(pieces):
        _write(root / "train" / f"piece{i:02d}.mid", rows, tempo)
    _write(root / "test" / "copy.mid", *pieces[0])
    _write(root / "test" / "down3.mid", transposed(pieces[1][0], -3), pieces[1][1])
    _write(root / "test" / "faster.mid", pieces[2][0], pieces[2][1] * 1.1)
    _write(root / "test" / "stretched.midi", stretched(pieces[3][0], 1.1), pieces[3][1])
    _write(root / "test" / "strings.mid", revoiced(pieces[4][0], rng), pieces[4][1])
    for i in range(4):
        _write(root / "test" / f"new{i}.mid", *random_piece(rng))
    (root / "test" / "notes.mid").write_text("this is not MIDI\n")
    whole = score_to_midi_bytes(to_score(*pieces[5]))
    (root / "test" / "cut.mid").write_bytes(whole[: len(whole) // 2])
    import symusic

    (root / "test" / "silent.mid").write_bytes(score_to_midi_bytes(symusic.Score(480)))
    return root


def test_reading_names_what_is_wrong_with_a_file(tmp_path: Path) -> None:
    rows, tempo = random_piece(np.random.default_rng(0))
    good = parse_midi(score_to_midi_bytes(to_score(rows, tempo)))
    assert len(good.notes) == len(rows) and good.tempo == pytest.approx(tempo, rel=1e-4)
    with pytest.raises(MidiProblem, match=r"^unreadable: not a MIDI file \(it starts with bytes 52 49 46 46"):
        parse_midi(b"RIFF\x00\x00\x00\x00WAVEfmt ")
    with pytest.raises(MidiProblem, match=r"^unreadable: not a MIDI file \(it starts with bytes 49 44 33"):
        parse_midi(b"ID3\x03 an mp3")
    with pytest.raises(MidiProblem, match=r"^unreadable: not a complete MIDI file"):
        parse_midi(score_to_midi_bytes(to_score(rows, tempo))[:30])
    with pytest.raises(MidiProblem, match=r"^unreadable: the file is empty \(0 bytes\)"):
        parse_midi(b"")
    with pytest.raises(MidiProblem, match=r"^missing: no such file"):
        read_midi(str(tmp_path / "gone.mid"))
    with pytest.raises(MidiProblem, match=r"^not regular: "):
        read_midi(str(tmp_path))


def test_a_midi_folder_is_told_from_an_audio_one(dataset: Path, tmp_path: Path) -> None:
    assert is_midi_dataset([str(dataset)])
    assert is_midi_dataset([], [("train", str(dataset / "train")), ("test", str(dataset / "test"))])
    (tmp_path / "a.wav").write_bytes(b"")
    (tmp_path / "b.mid").write_bytes(b"")
    assert not is_midi_dataset([str(tmp_path)])  # audio there: the audio audit names the MIDI file
    assert not is_midi_dataset([str(tmp_path / "nowhere")])


def test_the_file_audit_finds_every_broken_file_and_every_copy(dataset: Path) -> None:
    r = run_midi_audit([str(dataset)])
    by_id: dict[str, list] = {}
    for f in r.findings:
        by_id.setdefault(f.id, []).append(f)
    unreadable = sorted(Path(f.evidence["path"]).name for f in by_id["file.unreadable"])
    assert unreadable == ["cut.mid", "notes.mid"]
    assert all(f.stage == "dataset" and f.severity.value == "error" for f in by_id["file.unreadable"])
    assert [Path(f.evidence["path"]).name for f in by_id["symbolic.empty"]] == ["silent.mid"]
    (dup,) = by_id["split.duplicate"]
    assert "copy.mid ~ " in dup.message and "piece00.mid" in dup.message
    (tr,) = by_id["split.transposed_copy"]
    assert "down3.mid" in tr.message and "-3 semitones" in tr.message and tr.evidence["pairs"][0]["shift"] == -3
    (alt,) = by_id["split.alternate_version"]
    names = {Path(p["a"]).name: p for p in alt.evidence["pairs"]}
    assert set(names) == {"faster.mid", "stretched.midi", "strings.mid"}
    assert names["faster.mid"]["tempo_ratio"] == pytest.approx(1.1, abs=1e-3)
    assert names["stretched.midi"]["tempo_ratio"] == pytest.approx(1 / 1.1, abs=1e-3)
    assert names["strings.mid"]["revoiced"] and "tempo ×1.100" in alt.message
    assert len(r.files) == 32 and sum(f["problem"] is not None for f in r.files) == 2  # nothing else lost
    assert {m["kind"] for m in r.matches} == {"duplicate", "transposed", "alternate"}


def test_a_manifest_of_midi_files_and_a_clean_dataset(dataset: Path, tmp_path: Path) -> None:
    lines = [{"path": str(dataset / "test" / n), "description": f"piece {n}"} for n in ("down3.mid", "new0.mid")]
    lines.append({"path": "missing.mid"})
    manifest = tmp_path / "test" / "data.jsonl"
    manifest.parent.mkdir()
    manifest.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    r = run_midi_audit([], [("train", str(dataset / "train")), ("test", str(manifest))])
    ids = sorted(f.id for f in r.findings)
    assert ids == ["file.missing", "split.transposed_copy"]
    assert "missing.mid" in next(f.message for f in r.findings if f.id == "file.missing")
    clean = run_midi_audit([], [("train", str(dataset / "train")), ("test", str(dataset / "test" / "new0.mid"))])
    assert [f for f in clean.findings if f.severity.value in ("warning", "error")] == []


def test_the_audit_command_audits_a_midi_folder_with_reports(dataset: Path, tmp_path: Path) -> None:
    out, page = tmp_path / "a.json", tmp_path / "a.html"
    res = CliRunner().invoke(cli, ["audit", str(dataset), "--json", str(out), "--html", str(page)])
    assert res.exit_code == 1, res.output
    assert "MIDI files" in res.output and "pieces" in res.output
    rep = json.loads(out.read_text())
    ids = {f["id"] for f in rep["findings"]}
    assert {"file.unreadable", "symbolic.empty", "split.duplicate", "split.transposed_copy",
            "split.alternate_version"} <= ids
    assert rep["matches"] and {m["kind"] for m in rep["matches"]} == {"duplicate", "transposed", "alternate"}
    assert "split.transposed_copy" in page.read_text()
    res = CliRunner().invoke(cli, ["audit", str(dataset), "--stats", str(out)])
    assert res.exit_code == 2 and "audio datasets" in res.output
