"""`signalchain audit` on clean datasets in the conventions real fine-tuning sets follow (chunk files of
long takes that keep their take's caption, as AudioCraft sidecars and as an HF audiofolder): no warning;
the captions their chunks share are one info. The planted placeholder caption still warns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from signalchain.cli import cli


@pytest.mark.parametrize("kind", ["audiocraft", "audiofolder"])
def test_chunked_takes_audit_without_a_warning(conventions: dict[str, Any], kind: str, tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["audit", str(conventions[kind]), "--no-cache", "--workers", "1", "-q",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    findings = json.loads(out.read_text())["findings"]
    assert [f["id"] for f in findings if f["severity"] != "info"] == []
    pieces = [f for f in findings if f["id"] == "caption.duplicate"]
    assert len(pieces) == 1 and "pieces of one recording" in pieces[0]["message"]
    assert len(pieces[0]["evidence"]["groups"]) == 8 and {len(g) for g in pieces[0]["evidence"]["groups"]} == {4}


def test_the_placeholder_caption_on_different_recordings_still_warns(planted: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    CliRunner().invoke(cli, ["audit", "--split", f"train={planted['train']}", "--no-cache", "--workers", "1", "-q",
                             "--json", str(out)])
    dup = [f for f in json.loads(out.read_text())["findings"] if f["id"] == "caption.duplicate"]
    warned = [f for f in dup if f["severity"] == "warning"]
    assert len(warned) == 1 and warned[0]["evidence"]["caption"] == "music" and warned[0]["evidence"]["count"] == 4
