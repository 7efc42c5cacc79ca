"""Whose line is blamed: never click, signalchain's machinery or the standard library (fake stacks)."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import click
import torch

from signalchain.probes import host_reads
from signalchain.probes.frames import OWN_DIR, code_frames, never_blamed

SITE = os.path.dirname(os.path.dirname(torch.__file__))  # the site-packages torch lives in
STDLIB = contextlib.__file__
CLICK = os.path.join(os.path.dirname(click.__file__), "core.py")
TORCH = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "module.py")
PROBE = os.path.join(OWN_DIR, "probes", "host_reads.py")
DOCTOR = os.path.join(OWN_DIR, "experiments", "doctor.py")
CLI = os.path.join(OWN_DIR, "cli", "doctor_cmd.py")
USER = "/home/me/train/model.py"
ENCODEC = os.path.join(SITE, "transformers", "models", "encodec", "modeling_encodec.py")
ENTRY = "/home/me/.venv/bin/signalchain"


def stack(*files: str) -> SimpleNamespace:
    """A fake frame chain, innermost first, line i+1 for the i-th file."""
    frame = None
    for i, path in reversed(list(enumerate(files))):
        frame = SimpleNamespace(f_code=SimpleNamespace(co_filename=path), f_lineno=i + 1, f_back=frame)
    return frame


def test_never_blamed_names_the_standard_library_and_click_only():
    assert never_blamed(STDLIB) and never_blamed(CLICK) and never_blamed("<frozen runpy>")
    assert not never_blamed(ENCODEC) and not never_blamed(USER)


def test_the_walk_stops_at_the_machinery_that_called_the_pipeline():
    frames = list(code_frames(stack(PROBE, TORCH, USER, TORCH, DOCTOR, CLI, CLICK, STDLIB, ENTRY)))
    assert frames == [(USER, 3)]  # not the entry script, click or runpy beyond the doctor


def test_standard_library_and_click_frames_are_skipped_inside_the_pipeline():
    frames = list(code_frames(stack(PROBE, STDLIB, USER, CLICK, USER, DOCTOR)))
    assert [p for p, _ in frames] == [USER, USER]


def test_a_read_with_no_pipeline_frame_blames_nothing_outside_signalchain(monkeypatch):
    """A read made by signalchain itself, called from click: no site, rather than click's or the script's line."""
    monkeypatch.setattr(host_reads.sys, "_getframe", lambda depth: stack(PROBE, TORCH, DOCTOR, CLI, CLICK, ENTRY))
    assert host_reads.read_site() == ("?", False, None)


def test_a_library_read_names_the_users_line_that_called_it(monkeypatch):
    monkeypatch.setattr(host_reads.sys, "_getframe",
                        lambda depth: stack(PROBE, TORCH, ENCODEC, STDLIB, USER, DOCTOR, CLICK, ENTRY))
    assert host_reads.read_site() == (f"{ENCODEC}:3", True, f"{USER}:5")


def test_a_library_read_from_no_user_line_names_no_caller(monkeypatch):
    """The library called straight from signalchain's machinery: no 'called from' the CLI or click."""
    monkeypatch.setattr(host_reads.sys, "_getframe", lambda depth: stack(PROBE, ENCODEC, DOCTOR, CLI, CLICK, ENTRY))
    assert host_reads.read_site() == (f"{ENCODEC}:2", True, None)
