"""A save keeps one complete golden, old or new, at every instant (DESIGN §5, §8).

Every step of a save that changes the disk (each file write, each rename, each removal) is
observed: the folder is copied just before and just after it, as a kill at that instant would
leave it (no cleanup runs after a kill), and each copy must load as the old or the new golden.
Then the save is run again with an exception raised at each step in turn, and what the live
folder holds after the exception must load too.
"""

import os
import shutil
from pathlib import Path

import pytest
from golden_helpers import tiny_trace

from signalchain import GoldenFileError, compare_traces, load_golden, save_golden
from signalchain.golden import store as store_mod

OLD, NEW = tiny_trace(), tiny_trace(shift=0.5)


class Killed(BaseException):
    """Not an Exception: nothing in signalchain may swallow it, as nothing can swallow a SIGKILL."""


def _which(folder: Path) -> str:
    """'old' or 'new' for the golden `folder` holds (raises if it holds neither)."""
    trace = load_golden(folder).trace
    for label, ref in (("old", OLD), ("new", NEW)):
        if compare_traces(ref, trace, per_stage=None).identical:
            return label
    raise AssertionError(f"{folder} holds a golden that is neither the old nor the new one")


class Steps:
    """Wraps every disk-changing call a save makes; copies the folder around it; kills on request."""

    def __init__(self, monkeypatch, parent: Path, snaps: Path, kill_at: int | None = None):
        self.parent, self.snaps, self.kill_at, self.n, self.k, self.names = parent, snaps, kill_at, 0, 0, []
        for owner, name in ((os, "replace"), (os, "rename"), (shutil, "rmtree"), (store_mod, "save_file"),
                            (store_mod, "write_audio"), (store_mod, "_write_manifest")):
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name), name))

    def _snap(self, tag: str) -> None:
        if self.snaps is not None:
            shutil.copytree(self.parent, self.snaps / f"{self.k:03d}-{tag}", symlinks=True)
            self.k += 1

    def _wrap(self, fn, name):
        def step(*args, **kwargs):
            paths = [Path(a) for a in args if isinstance(a, (str, os.PathLike))]
            if not any(self.parent in p.parents for p in paths):
                return fn(*args, **kwargs)  # not the save under test (the snapshots themselves)
            self.names.append(name)
            self._snap(f"before-{name}")
            self.n += 1
            if self.n - 1 == self.kill_at:
                raise Killed(name)  # the save's own cleanup then runs, as after any exception
            out = fn(*args, **kwargs)
            self._snap(f"after-{name}")
            return out
        return step


def _start(parent: Path, state: str) -> Path:
    path = parent / "g"
    if state != "missing":
        save_golden(path, OLD, {})
    if state == "previous_only":  # a save was killed between its two renames
        os.replace(path, parent / "g.previous")
    if state == "golden_and_stale_previous":
        shutil.copytree(path, parent / "g.previous")
    if state == "golden_and_stale_temp":  # a save was killed while writing its temporary folder
        shutil.copytree(path, parent / ".g.k1ll3d_x.tmp")
        (parent / ".g.k1ll3d_x.tmp" / "manifest.json").unlink()
    return path


STATES = ["golden", "previous_only", "golden_and_stale_previous", "golden_and_stale_temp", "missing"]


@pytest.mark.parametrize("state", STATES)
def test_every_instant_of_a_save_holds_one_complete_golden(tmp_path, monkeypatch, state):
    parent, snaps = tmp_path / "work", tmp_path / "snaps"
    parent.mkdir()
    snaps.mkdir()
    path = _start(parent, state)
    steps = Steps(monkeypatch, parent, snaps)
    save_golden(path, NEW, {})
    monkeypatch.undo()
    assert {"save_file", "write_audio", "_write_manifest", "replace"} <= set(steps.names)
    seen = []
    for snap in sorted(snaps.iterdir()):
        try:
            seen.append(_which(snap / "g"))
        except GoldenFileError as exc:  # only before a first golden ever existed
            assert state == "missing" and "no golden batch here" in str(exc), (snap.name, exc)
            seen.append("none")
    assert seen[-1] == "new" and _which(path) == "new"
    assert seen == sorted(seen, key=["none", "old", "new"].index)  # never back to the old one
    assert sorted(p.name for p in parent.iterdir()) == ["g"]  # no temporary, no .previous left


@pytest.mark.parametrize("state", STATES)
def test_an_exception_at_any_step_leaves_old_or_new_loadable(tmp_path, monkeypatch, state):
    kill_at, outcomes = 0, []
    while True:
        parent = tmp_path / f"run{kill_at}"
        parent.mkdir()
        path = _start(parent, state)
        with monkeypatch.context() as mp:
            steps = Steps(mp, parent, None, kill_at)
            try:
                save_golden(path, NEW, {})
            except Killed:
                pass
            else:
                break
        try:
            outcomes.append(_which(path))
        except GoldenFileError as exc:
            assert state == "missing" and "no golden batch here" in str(exc), (kill_at, steps.names, exc)
            outcomes.append("none")
        # the next save succeeds from whatever the killed one left, and tidies it
        save_golden(path, NEW, {})
        assert _which(path) == "new" and sorted(p.name for p in parent.iterdir()) == ["g"], kill_at
        kill_at += 1
    assert kill_at == len(steps.names) >= (5 if state == "missing" else 7), steps.names  # each step killed once
    assert outcomes[0] == ("none" if state == "missing" else "old")


def test_next_save_removes_only_its_own_stale_temporaries(tmp_path):
    path = save_golden(tmp_path / "g", OLD, {})
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep me")
    stale = [".g.abcd1234.tmp", ".g.zz_9zz_9.tmp"]
    for name in stale:
        (tmp_path / name / "audio").mkdir(parents=True)
        (tmp_path / name / "values.safetensors").write_bytes(b"half written")
    kept_dirs = [".g.abcd123.tmp", ".g.ABCD1234.tmp", ".gx.abcd1234.tmp", ".g.abcd1234.tmp.bak", "g.abcd1234.tmp",
                 ".h.abcd1234.tmp"]
    for name in kept_dirs:
        (tmp_path / name).mkdir()
    (tmp_path / ".g.efgh5678.tmp").write_text("a file, not a folder a save made")
    os.symlink(precious, tmp_path / ".g.link1234.tmp")
    save_golden(path, NEW, {})
    left = {p.name for p in tmp_path.iterdir()}
    assert not left & set(stale)
    assert set(kept_dirs) | {".g.efgh5678.tmp", ".g.link1234.tmp", "g", "precious"} == left
    assert (precious / "data.txt").read_text() == "keep me"
    assert _which(path) == "new"


def test_load_falls_back_to_previous_only_when_the_golden_is_absent(tmp_path):
    path = save_golden(tmp_path / "g", OLD, {})
    shutil.copytree(path, tmp_path / "g.previous")
    save_golden(tmp_path / "other", NEW, {})
    shutil.rmtree(tmp_path / "g.previous")
    os.replace(tmp_path / "other", tmp_path / "g.previous")
    assert _which(path) == "old"  # g exists: it is read, never the .previous beside it
    shutil.rmtree(path)
    assert _which(path) == "new" and load_golden(path).path.name == "g.previous"


def test_a_load_racing_a_whole_save_reads_one_complete_golden(tmp_path, monkeypatch):
    """The reader holds the old manifest when a save swaps the new golden in and deletes the old one:
    it must not mix the two (old manifest, new values) nor fail; it reads the new one again."""
    path = save_golden(tmp_path / "g", OLD, {})
    real, raced = store_mod.parse_manifest, []

    def racing(raw, mpath):
        out = real(raw, mpath)
        if not raced:
            raced.append(mpath)
            monkeypatch.setattr(store_mod, "parse_manifest", real)
            save_golden(path, NEW, {})
        return out

    monkeypatch.setattr(store_mod, "parse_manifest", racing)
    assert _which(path) == "new" and raced
