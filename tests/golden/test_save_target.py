"""Where a golden may be written: a missing folder, an empty one, or an existing golden - and
nowhere else, so that a save never destroys what it did not write."""

import os
import tempfile

import pytest
from golden_helpers import read_manifest, tiny_trace

from signalchain import GoldenFileError, UsageError, load_golden, save_golden
from signalchain.golden import check_target

TRACE = tiny_trace()


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_missing_and_empty_folders_are_written(tmp_path):
    save_golden(tmp_path / "a" / "b" / "new", TRACE, {})
    (tmp_path / "empty").mkdir()
    save_golden(tmp_path / "empty", TRACE, {})
    assert load_golden(tmp_path / "a" / "b" / "new").trace.names() == load_golden(tmp_path / "empty").trace.names()


def test_an_existing_golden_is_replaced(tiny):
    folder, _ = tiny
    save_golden(folder, tiny_trace(shift=1.0), {"seed": 9})
    assert read_manifest(folder)["provenance"]["seed"] == 9


@pytest.mark.parametrize("content", [
    {"thesis.tex": "chapter 1", "figures/plot.png": "png"},
    {"manifest.json": '{"not": "a golden"}', "data.bin": "x"},
    {".hidden": "dotfile only"},
])
def test_a_folder_that_is_not_a_golden_is_refused_naming_its_files(tmp_path, content):
    folder = tmp_path / "work"
    for rel, text in content.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    before = _files(folder)
    with pytest.raises(
        UsageError, match=r"work: the output folder is not empty and not a golden batch .*capture would delete"
    ) as exc:
        save_golden(folder, TRACE, {})
    assert sorted(content)[0].split("/")[0] in str(exc.value)  # names (some of) what it would destroy
    assert _files(folder) == before and [p.name for p in tmp_path.iterdir()] == ["work"]  # no temporary left


def test_a_golden_holding_other_files_is_refused_naming_them(tiny):
    folder, _ = tiny
    (folder / "notes.txt").write_text("my observations")
    (folder / "audio" / "extra.wav").write_bytes(b"RIFF")
    with pytest.raises(UsageError, match=r"is a golden batch but also holds audio/extra\.wav, notes\.txt"):
        save_golden(folder, TRACE, {})
    assert (folder / "notes.txt").read_text() == "my observations"


def test_a_report_page_beside_the_golden_is_part_of_it(tiny):
    folder, _ = tiny
    (folder / "report.html").write_text("<html></html>")
    save_golden(folder, TRACE, {})
    assert not (folder / "report.html").exists()


def test_an_old_version_golden_may_be_recaptured_over(tiny, forge):
    folder, _ = tiny
    m = forge.read(folder)
    m["schema_version"] = 1
    del m["manifest_sha256"]
    forge.write(folder, m, reseal=False)
    with pytest.raises(GoldenFileError, match="re-capture it"):
        load_golden(folder)
    save_golden(folder, TRACE, {})
    assert load_golden(folder).trace.names() == TRACE.names()


def test_a_tampered_golden_is_not_overwritten_without_being_cleared(tiny, forge):
    folder, _ = tiny
    m = forge.read(folder)
    m["provenance"]["seed"] = 5
    forge.write(folder, m, reseal=False)
    with pytest.raises(UsageError, match=r"not a golden batch \(its manifest\.json was changed after capture"):
        save_golden(folder, TRACE, {})


@pytest.mark.parametrize("out", [".", "..", "./", "sub/..", "../.."])
def test_current_folder_and_above_are_usage_errors(tmp_path, monkeypatch, out):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub") if out == "sub/.." else monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"current folder or one above it"):
        save_golden(out, TRACE, {})
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def test_absolute_path_of_the_current_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="current folder or one above it"):
        check_target(str(tmp_path))


def test_a_file_and_a_link_are_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        save_golden(tmp_path / "file", TRACE, {})
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(UsageError, match="is a symbolic link"):
        save_golden(tmp_path / "link", TRACE, {})
    with pytest.raises(UsageError, match=r"cannot write a golden here: .*file is not a folder"):
        save_golden(tmp_path / "file" / "g", TRACE, {})


def test_a_previous_folder_that_is_not_a_golden_is_not_destroyed(tmp_path):
    (tmp_path / "g.previous").mkdir()
    (tmp_path / "g.previous" / "precious.txt").write_text("x")
    with pytest.raises(UsageError, match=r"g\.previous: g\.previous \(where the earlier version waits.*precious\.txt"):
        save_golden(tmp_path / "g", TRACE, {})
    assert (tmp_path / "g.previous" / "precious.txt").read_text() == "x"


def test_an_unwritable_place_is_a_usage_error_leaving_no_temporary(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(UsageError, match=r"g: cannot write a golden here \(Permission denied\)"):
        save_golden(tmp_path / "g", TRACE, {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_parent_is_a_usage_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(UsageError, match="cannot write a golden here"):
            save_golden(ro / "g", TRACE, {})
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)
