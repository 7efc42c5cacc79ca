"""Symlinks and special files inside a golden are refused: a golden holds real files only."""

import os
import shutil
import threading

import pytest

from signalchain import GoldenFileError, load_golden

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX links")


def _link_in_place(folder, rel, tmp_path):
    """Replace `rel` by a link to an identical copy outside the golden (same bytes, same sha256)."""
    outside = tmp_path / "outside" / rel.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    shutil.move(str(folder / rel), str(outside))
    os.symlink(outside, folder / rel)


@pytest.mark.parametrize("rel", ["manifest.json", "values.safetensors", "audio/audio.original.wav", "audio"])
def test_a_linked_file_or_folder_is_refused_even_with_identical_bytes(tiny, tmp_path, rel):
    folder, _ = tiny
    _link_in_place(folder, rel, tmp_path)
    with pytest.raises(GoldenFileError, match=rf"{rel.replace('.', '[.]')}: is a symbolic link"):
        load_golden(folder)


def test_the_golden_folder_itself_as_a_link_is_refused(tiny, tmp_path):
    folder, _ = tiny
    os.symlink(folder, tmp_path / "alias")
    with pytest.raises(GoldenFileError, match=r"alias: is a symbolic link; a golden batch must be a real folder"):
        load_golden(tmp_path / "alias")
    assert load_golden(folder).path == folder


def test_a_link_beside_the_listed_files_is_refused(tiny):
    folder, _ = tiny
    os.symlink("/etc/passwd", folder / "notes")
    with pytest.raises(GoldenFileError, match=r"notes: is a symbolic link"):
        load_golden(folder)


def test_a_dangling_link_as_the_previous_version_is_refused(tiny, tmp_path):
    folder, _ = tiny
    shutil.rmtree(folder)
    os.symlink(tmp_path / "nowhere", tmp_path / "tiny.previous")
    with pytest.raises(GoldenFileError, match=r"tiny\.previous: is a symbolic link"):
        load_golden(folder)


def _load_within(folder, seconds=20.0):
    box = {}

    def run():
        try:
            load_golden(folder)
        except Exception as exc:  # noqa: BLE001 - reported to the test thread
            box["exc"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "load_golden blocked on a special file"
    return box.get("exc")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("rel", ["manifest.json", "values.safetensors", "audio/audio.original.wav"])
def test_a_fifo_in_a_file_slot_is_refused_without_blocking(tiny, rel):
    folder, _ = tiny
    (folder / rel).unlink()
    os.mkfifo(folder / rel)
    exc = _load_within(folder)
    assert isinstance(exc, GoldenFileError) and "is not a regular file (a pipe or a device)" in str(exc), exc
    assert rel.split("/")[-1] in str(exc)


def test_a_folder_in_a_file_slot_is_refused(tiny):
    folder, _ = tiny
    (folder / "values.safetensors").unlink()
    (folder / "values.safetensors").mkdir()
    with pytest.raises(GoldenFileError, match=r"values\.safetensors: is a folder"):
        load_golden(folder)
