"""`signalchain audit` from the command line: exit codes, JSON and HTML reports, usage errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from signalchain.cli import cli


def test_audit_of_planted_splits_exits_1_with_reports(planted: dict[str, Any], tmp_path: Path) -> None:
    out, page = tmp_path / "a.json", tmp_path / "a.html"
    res = CliRunner().invoke(
        cli,
        [
            "audit",
            "--split",
            f"train={planted['train']}",
            "--split",
            f"valid={planted['valid']}",
            "--max-caption-tokens",
            "40",
            "--no-cache",
            "--json",
            str(out),
            "--html",
            str(page),
        ],
    )
    assert res.exit_code == 1, res.output
    rep = json.loads(out.read_text())
    ids = {f["id"] for f in rep["findings"]}
    assert {"file.missing", "split.duplicate", "split.near_duplicate", "caption.truncated"} <= ids
    assert {s["split"] for s in rep["sources"]} == {"train", "valid"} and rep["matches"] and rep["files"]
    html = page.read_text()
    assert "split.near_duplicate" in html and "<audio" in html  # the flagged pairs can be heard


def test_audit_of_a_clean_folder_of_splits_exits_0(clean: dict[str, Any], tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["audit", str(clean["root"]), "--cache", str(tmp_path / "c.sqlite"), "--workers", "1"]
    )
    assert res.exit_code == 0, res.output
    assert "train" in res.output and "valid" in res.output


def test_audit_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["audit"])
    assert res.exit_code == 2 and "nothing to audit" in res.output
    res = runner.invoke(cli, ["audit", "--split", "train"])
    assert res.exit_code == 2 and "NAME=PATH" in res.output
    res = runner.invoke(cli, ["audit", str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 2 and "no such file or folder" in res.output
    (tmp_path / "stats.json").write_text("[1, 2]")
    res = runner.invoke(cli, ["audit", str(tmp_path), "--stats", str(tmp_path / "stats.json")])
    assert res.exit_code == 2 and "--stats" in res.output
