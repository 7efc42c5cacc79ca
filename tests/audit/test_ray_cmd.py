"""`signalchain audit --engine ray` as a user runs it: a process of its own that starts a local Ray of
2 CPUs (no mock). Its JSON and HTML reports say what the local engine's say; Ctrl-C stops the cluster
work, keeps what was measured in the cache and leaves no Ray process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from signalchain.audit.ray_engine import INJECT_ENV
from signalchain.cli import cli

pytest.importorskip("ray")

pytestmark = pytest.mark.slow
SC = [sys.executable, "-c", "from signalchain.cli import main; main()"]


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (INJECT_ENV, "RAY_ADDRESS")}
    return {**env, "HF_HUB_OFFLINE": "1", "CI": "1", "SIGNALCHAIN_PROGRESS_GRACE": "0", **more}


def _audit(planted: dict[str, Any], out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    cmd = [*SC, "audit", "--split", f"train={planted['train']}", "--split", f"valid={planted['valid']}",
           "--max-caption-tokens", "40", "--no-cache", "--workers", "2",
           "--json", str(out / "a.json"), "--html", str(out / "a.html"), *more]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)


def _same_run(report: dict[str, Any]) -> dict[str, Any]:
    """A JSON report without how long the run took, where it ran and its private cache's name."""
    out = {k: v for k, v in report.items() if k not in ("timings", "engine", "cache")}
    return {**out, "cache": {k: v for k, v in report["cache"].items() if k != "path"}}


def _page(html: str) -> str:
    """The page without its run's timings and engine line."""
    html = re.sub(r"\d+(\.\d+)? s · cache", "T s · cache", html)
    html = re.sub(r"timings: \{[^}]*\}", "timings: T", html)
    return re.sub(r"<p class='muted' id='engine'>.*?</p>", "", html)


def test_json_and_html_reports_equal_the_local_engines(planted: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    local = _audit(planted, tmp_path / "local")
    on_ray = _audit(planted, tmp_path / "ray", "--engine", "ray", "--shard-vectors", "64")  # sharded, on Ray
    assert (local.returncode, on_ray.returncode) == (1, 1), on_ray.stderr[-2000:]
    a, b = (json.loads((tmp_path / d / "a.json").read_text()) for d in ("local", "ray"))
    assert _same_run(a) == _same_run(b)
    assert b["engine"]["engine"] == "ray" and b["engine"]["files"] == len(b["files"]) == len(a["files"])
    assert "files/s across 2 CPUs on 1 node" in on_ray.stderr  # progress counts files across the cluster
    pages = [(tmp_path / d / "a.html").read_text() for d in ("local", "ray")]
    assert "measured on Ray" in pages[1]
    assert _page(pages[0]) == _page(pages[1])


def _session_processes(sid: int) -> list[str]:
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(d)) == sid:
                out.append(Path(f"/proc/{d}/cmdline").read_bytes()[:80].decode(errors="replace"))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes through /proc")
def test_ctrl_c_stops_the_cluster_work_and_keeps_what_was_measured(planted: dict[str, Any], tmp_path: Path) -> None:
    """A file that hangs its decoder holds the audit; SIGINT then ends it at once, as a user's Ctrl-C."""
    cache = tmp_path / "fp.sqlite"
    cmd = [*SC, "audit", "--split", f"train={planted['train']}", "--split", f"valid={planted['valid']}",
           "--engine", "ray", "--workers", "2", "--cache", str(cache)]
    proc = subprocess.Popen(cmd, env=_env(**{INJECT_ENV: "hang:v-gain.wav"}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    sid = os.getsid(proc.pid)
    try:
        t0, seen = time.monotonic(), []
        while time.monotonic() - t0 < 180:  # until files are being measured on Ray
            line = proc.stderr.readline() if proc.stderr else ""
            seen.append(line)
            if re.search(r"\((\d+)/\d+\)", line) and "on Ray" in line or not line:
                break
        time.sleep(3.0)  # every other file is measured by now (the hung one keeps the audit open)
        assert proc.poll() is None, "".join(seen)
        assert any("ray::" in p or "raylet" in p for p in _session_processes(sid))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(sid, signal.SIGKILL)
    assert proc.returncode == 2 and "interrupted after measuring" in err, err[-2000:]
    assert f"kept in the cache {cache}" in err
    measured = int(re.search(r"interrupted after measuring (\d+) of", err).group(1))  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while _session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _session_processes(sid)  # no raylet, GCS or worker of its Ray is left
    with sqlite3.connect(cache) as db:
        rows = db.execute("SELECT count(*) FROM measures").fetchone()[0]
    assert measured > 0 and rows >= measured - 1  # all but the non-finite file (never cached) are kept


@pytest.mark.parametrize("args, says", [
    (["--address", "127.0.0.1:1"], "apply to --engine ray"),
    (["--file-timeout", "5"], "apply to --engine ray"),
    (["--engine", "ray", "--file-timeout", "0"], "--file-timeout must be > 0"),
    (["--engine", "ray", "--retries", "-1"], "--retries must be ≥ 0"),
    (["--shard-vectors", "0"], "--shard-vectors must be ≥ 1"),
])
def test_ray_options_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    res = CliRunner().invoke(cli, ["audit", str(tmp_path), *args])
    assert res.exit_code == 2 and says in res.output, res.output


def test_a_midi_dataset_is_not_sent_to_ray(tmp_path: Path) -> None:
    head = b"MThd\x00\x00\x00\x06\x00\x00\x00\x01\x00\x60"  # one track, 96 ticks a beat
    (tmp_path / "a.mid").write_bytes(head + b"MTrk\x00\x00\x00\x04\x00\xff\x2f\x00")
    res = CliRunner().invoke(cli, ["audit", str(tmp_path), "--engine", "ray"])
    assert res.exit_code == 2 and "--engine ray audits audio datasets" in res.output, res.output
