"""Helpers for the Python API's tests: the command line's JSON report beside the function's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner


@pytest.fixture
def cli_json(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """`cli_json("doctor", ...)`: the report `signalchain <args> --json FILE` writes, as a dict."""
    from signalchain.cli import cli

    def run(*args: str) -> dict[str, Any]:
        out = tmp_path / f"cli-{args[0]}.json"
        res = CliRunner().invoke(cli, [*args, "--json", str(out)])
        assert res.exit_code in (0, 1), res.output
        return json.loads(out.read_text(encoding="utf-8"))

    return run
